"""A shop that welcomes its new customers by email, in the background."""

from __future__ import annotations

import psycopg

import jobyard

app = jobyard.App(project="acme/shop")

# Stands in for an email provider: what send_welcome "sent".
SENT: list[str] = []


@app.task(queue="emails", max_attempts=3)
async def send_welcome(ctx: jobyard.JobContext, email: str) -> str:
    await ctx.progress(0.5, "rendering the email")
    SENT.append(email)
    return f"welcomed {email}"


async def sign_up(conn: psycopg.AsyncConnection, email: str) -> None:
    """Create the customer and queue their welcome email in the caller's transaction:
    both happen, or neither does."""
    await conn.execute("INSERT INTO customers (email) VALUES (%s)", (email,))
    await send_welcome.defer(conn=conn, email=email)
