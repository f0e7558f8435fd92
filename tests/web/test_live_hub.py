"""The API's one LISTEN connection and its subscriptions, against a real PostgreSQL, without a
browser: the ordering that keeps a stream from missing a change made while it opens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from jobyard.core import live
from jobyard.db.pool import Conn
from jobyard.web.live import Event, LiveHub, Subscription, subscribed_render


@pytest.fixture
async def hub(db_url: str) -> AsyncIterator[LiveHub]:
    hub = LiveHub(db_url)
    try:
        yield hub
    finally:
        await hub.stop()


async def _next_of_kind(sub: Subscription, kind: str, within_s: float) -> Event | None:
    deadline = asyncio.get_running_loop().time() + within_s
    while (left := deadline - asyncio.get_running_loop().time()) > 0:
        event = await sub.next(left)
        if event is not None and event.kind == kind:
            return event
    return None


async def test_a_change_committed_while_a_stream_renders_its_first_fragment_reaches_it(
    hub: LiveHub, conn: Conn
) -> None:
    """The change commits after the first render has read the page, and its notification is
    fanned out before the render returns: the worst timing for a stream that subscribes after
    rendering (it found this in CI: a job cancelled as its page opened kept its Cancel button
    until the 15 s fallback re-render)."""
    watcher = hub.subscribe()
    await asyncio.wait_for(hub.connected.wait(), 10)
    assert await _next_of_kind(watcher, "listening", 10) is not None

    async def render() -> str:
        html = "<p>queued</p>"  # what the page read, before the change below
        await live.notify(conn, "cancelled", 7, 42)
        assert await _next_of_kind(watcher, "cancelled", 10) is not None  # already fanned out
        return html

    sub, first = await subscribed_render(hub, render)
    assert first == "<p>queued</p>"
    event = await _next_of_kind(sub, "cancelled", 2)
    assert event is not None, "the stream missed a change made during its first render"
    assert event.job_id == 42


async def test_a_refused_render_leaves_no_subscription_behind(hub: LiveHub) -> None:
    async def render() -> str:
        raise PermissionError("no access")

    with pytest.raises(PermissionError):
        await subscribed_render(hub, render)
    assert hub.subscribers == set()
