from __future__ import annotations

import psycopg

import jobyard
import shop
from jobyard.testing import assert_enqueued, drain, enqueued_jobs


async def test_sign_up_queues_a_welcome_email(app: jobyard.App, jobyard_database_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(jobyard_database_url) as conn:
        await shop.sign_up(conn, "ada@example.com")
    # Leaving the block committed the transaction: the customer and the job exist.
    job = await assert_enqueued(shop.send_welcome, email="ada@example.com")
    assert job.queue == "emails"
    assert shop.SENT == []  # nothing runs until a worker does


async def test_a_rolled_back_sign_up_queues_nothing(
    app: jobyard.App, jobyard_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(jobyard_database_url) as conn:
        await shop.sign_up(conn, "ada@example.com")
        await conn.rollback()  # say a later step of the request failed
    assert await enqueued_jobs(shop.send_welcome) == []


async def test_the_welcome_email_is_sent(app: jobyard.App) -> None:
    deferred = await shop.send_welcome.defer(email="grace@example.com")
    assert await drain(app, "emails") == {"succeeded": 1}
    assert shop.SENT == ["grace@example.com"]
    assert await deferred.job.result() == "welcomed grace@example.com"
    assert await enqueued_jobs(app) == []


async def test_run_until_idle_runs_every_queue(app: jobyard.App) -> None:
    await shop.send_welcome.defer_many([{"email": "a@example.com"}, {"email": "b@example.com"}])
    await app.run_until_idle()
    assert sorted(shop.SENT) == ["a@example.com", "b@example.com"]
