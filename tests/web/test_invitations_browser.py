"""Issue 12 in the dashboard, in Chromium against a real `jobyard api` process: an admin invites
from the members page (no password anywhere), the link the API logs where a mail would go opens
the invitation page, a new invitee sets their own password there, an existing account signs in
and accepts, and pending invitations are re-sent and revoked."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Browser, Page, expect

from jobyard.domain.enums import Role
from tests.api.conftest import FIXTURE_PASSWORD
from tests.api.processes import ApiProcess
from tests.web.conftest import Seed, screenshot_path, ui_sign_in

pytestmark = pytest.mark.browser


def logged_links(server: ApiProcess, email: str) -> list[str]:
    """The invitation links the API wrote in its log for `email` (path and query only)."""
    links = []
    for line in server.stderr().splitlines():
        if '"invitation link"' in line:
            event = json.loads(line)
            if event["to"] == email:
                parts = urlsplit(event["link"])
                links.append(f"{parts.path}?{parts.query}")
    return links


async def invite(page: Page, email: str, role: str = "member") -> None:
    await page.fill("#invite-form input[name=email]", email)
    await page.select_option("#invite-form select[name=role]", role)
    await page.click("#invite-form button[type=submit]")
    await expect(page.locator(".notice")).to_contain_text("Invitation sent")


async def test_a_new_invitee_sets_their_own_password_from_the_logged_link(
    page: Page, browser: Browser, server: ApiProcess, seed: Seed
) -> None:
    await ui_sign_in(page, seed.a)
    await page.click(f"a[href='/orgs/{seed.a.org_id}/members']")
    await invite(page, "newcomer@example.test", "viewer")
    await invite(page, "someone.else@example.test")
    rows = page.locator("#invitations tbody tr")
    await expect(rows).to_have_count(2)
    await expect(page.locator("body")).not_to_contain_text("password:")
    await page.screenshot(path=screenshot_path("invitations-list.png"), full_page=True)
    # Re-send gives a new link (the old one dies); revoke removes the row.
    row = page.locator("tr[data-email='someone.else@example.test']")
    await row.locator("button.resend").click()
    await expect(page.locator(".notice")).to_contain_text("new link")
    first, second = logged_links(server, "someone.else@example.test")
    assert first != second
    await page.locator("tr[data-email='someone.else@example.test'] button.revoke").click()
    await expect(page.locator(".notice")).to_contain_text("revoked")
    await expect(rows).to_have_count(1)

    # The invitee, in a browser of their own, opens the link from the log.
    (link,) = logged_links(server, "newcomer@example.test")
    invitee = await browser.new_context(
        base_url=server.base_url, viewport={"width": 1360, "height": 900}
    )
    p2 = await invitee.new_page()
    await p2.goto(link)
    await expect(p2.locator("h1")).to_have_text(f"Join {seed.a.org_name}")
    await p2.fill("input[name=display_name]", "New Comer")
    await p2.fill("input[name=password]", "newcomer-own-password")
    await p2.fill("input[name=password2]", "newcomer-own-password")
    await p2.screenshot(path=screenshot_path("invitation-redeem.png"), full_page=True)
    await p2.click("#redeem-form button[type=submit]")
    await p2.wait_for_url("**/projects?done=joined")
    await expect(p2.locator(".notice")).to_contain_text("you joined")
    await expect(p2.locator("main")).to_contain_text(seed.a.org_name)
    # The link worked once.
    await p2.goto(link)
    await expect(p2.locator(".error")).to_contain_text("invalid, used, revoked or expired")
    await p2.goto(logged_links(server, "someone.else@example.test")[-1])
    await expect(p2.locator(".error")).to_contain_text("invalid, used, revoked or expired")
    await invitee.close()
    # The admin now sees the newcomer as a member, and no pending invitation.
    await page.reload()
    await expect(page.locator("#members tr[data-email='newcomer@example.test']")).to_contain_text(
        "viewer"
    )
    await expect(page.locator("#invitations")).to_have_count(0)


async def test_an_existing_account_signs_in_and_accepts(
    page: Page, browser: Browser, server: ApiProcess, seed: Seed
) -> None:
    guest = seed.b.users[Role.VIEWER]
    await ui_sign_in(page, seed.a)
    await page.goto(f"/orgs/{seed.a.org_id}/members")
    await invite(page, guest.email)
    (link,) = logged_links(server, guest.email)
    context = await browser.new_context(base_url=server.base_url)
    p2 = await context.new_page()
    await p2.goto(link)
    await expect(p2.locator("#redeem-form")).to_have_count(0)  # no password for an account
    await p2.click("#sign-in-to-accept")
    await p2.fill("input[name=email]", guest.email)
    await p2.fill("input[name=password]", FIXTURE_PASSWORD)
    await p2.click("button[type=submit]")
    await p2.wait_for_url("**/invite?token=*")
    await p2.screenshot(path=screenshot_path("invitation-accept.png"), full_page=True)
    await p2.click("#accept-form button[type=submit]")
    await p2.wait_for_url("**/projects?done=joined")
    await expect(p2.locator("main")).to_contain_text(seed.a.org_name)
    await context.close()
