"""Celery app for the peer benchmark: the no-op task `noop` and the pickup probe `stamp`.

`celery -A celery_app worker --pool threads ...` runs it; the broker URL comes from
CELERY_BENCH_BROKER (the redis-server run.sh started). No result backend (ignore_result): a
fire-and-forget queue. Runs in the peer venv, never imports jobyard.

Celery keeps no record of a finished fire-and-forget task, so the drain is counted here: every
task start and end updates three numbers under a lock in the worker process (first start, last
end, count; host clock), and a thread writes them to the broker's Redis every 20 ms
(HSET bench:drain:<pid>), off the tasks' path. The time of the last end is taken when it
happens, so the flush interval does not lengthen the measured window.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Final

import redis
from celery import Celery  # type: ignore[attr-defined] # a lazily built module
from celery.signals import task_postrun, task_prerun

BROKER: Final = os.environ.get("CELERY_BENCH_BROKER", "redis://127.0.0.1:6379/0")
FLUSH_S: Final = 0.02

app = Celery("jobyard_peer", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    result_backend=None,
    task_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_send_task_events=False,
)


@app.task(name="noop")
def noop() -> None:
    return None


@app.task(name="stamp")
def stamp(sent_at: float) -> None:
    """Pickup probe: the host clock when the worker starts the task, beside when it was sent."""
    started = time.time()
    _client().rpush("bench:pickup", f"{sent_at!r} {started!r}")


_lock = threading.Lock()
_first_start: float | None = None
_last_end = 0.0
_count = 0
_flusher: threading.Thread | None = None
_redis: redis.Redis | None = None


def _client() -> redis.Redis:
    global _redis
    if _redis is None:
        _redis = redis.Redis.from_url(BROKER)
    return _redis


def _flush_forever() -> None:
    key = f"bench:drain:{os.getpid()}"
    written = -1
    client = redis.Redis.from_url(BROKER)
    while True:
        time.sleep(FLUSH_S)
        with _lock:
            first, last, count = _first_start, _last_end, _count
        if count != written and first is not None:
            client.hset(key, mapping={"first": repr(first), "last": repr(last), "count": count})
            written = count


@task_prerun.connect
def _started(**_: Any) -> None:
    global _first_start, _flusher
    now = time.time()
    with _lock:
        if _first_start is None:
            _first_start = now
            _flusher = threading.Thread(target=_flush_forever, daemon=True)
            _flusher.start()


@task_postrun.connect
def _ended(**_: Any) -> None:
    global _last_end, _count
    now = time.time()
    with _lock:
        _last_end = now
        _count += 1
