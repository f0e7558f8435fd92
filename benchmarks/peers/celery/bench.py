"""Celery's side of `jobyard bench` (Redis broker): the scenarios that apply, Celery's own API.

Run by run.sh inside the peer venv (celery + redis; it never imports jobyard):

    bench.py --broker REDIS_URL --workdir DIR --setup JSON [--runs N] [--quick]

REDIS_URL is the redis-server run.sh started for this run (no persistence); JSON is jobyard's
sizes and machine description. Prints ONE JSON object on stdout under jobyard's metric names
(medians of the runs), with every run under "details". Workers are real `celery worker`
processes with the threads pool; there is no result backend (ignore_result). Every time here is
the host clock (time.time() in this process and in the workers): Celery keeps no timestamps of
its own for a fire-and-forget task (celery_app.py says how the drain is counted).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import uuid
from dataclasses import asdict
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

import redis
from celery_app import app, noop, stamp
from peerlib import (
    BATCH_CAP,
    DRAIN_BUDGET_S,
    POLL_S,
    STALL_TIMEOUT_S,
    BenchError,
    Sizes,
    Workers,
    loadavg,
    result_object,
    say,
)

# `celery` sits beside the interpreter of the peer venv (not resolved: that leaves the venv).
CLI: Final = str(Path(sys.executable).parent / "celery")
QUEUE: Final = "celery"  # Celery's default queue: a Redis list of that name
# Worker flags: the threads pool (one process, N threads: the closest to jobyard's one process
# with N async job slots), and no cluster chatter (gossip, mingle, heartbeat) for one machine.
WORKER_FLAGS: Final = ("--pool", "threads", "--without-gossip", "--without-mingle")


def log(message: str) -> None:
    say("celery", message)


def reset(client: redis.Redis) -> None:
    """Empty the queue and the counters, keeping kombu's exchange bindings (`_kombu.*`)."""
    keys = [QUEUE, "unacked", "unacked_index", "bench:pickup", *client.keys("bench:drain:*")]
    client.delete(*keys)


def workers(broker: str, processes: int, workdir: Path, concurrency: int) -> Workers:
    argv = [CLI, "-A", "celery_app", "worker", *WORKER_FLAGS]
    argv += ["--without-heartbeat", "--concurrency", str(concurrency), "--loglevel", "WARNING"]
    return Workers(argv, processes, workdir, {"CELERY_BENCH_BROKER": broker})


def send_batch(total: int) -> None:
    """`total` no-op tasks by `apply_async(producer=...)` on one producer, BATCH_CAP per producer.

    Celery has no multi-message publish (every message is its own LPUSH). Its batch-like APIs
    are `group(...).apply_async()` and one producer held across many `apply_async` calls; the
    second skips the group's bookkeeping and measured about 2x faster here, so it is the one used
    (README: "How each number is taken")."""
    for at in range(0, total, BATCH_CAP):
        size = min(BATCH_CAP, total - at)
        with app.producer_or_acquire() as producer:
            for _ in range(size):
                noop.apply_async(producer=producer)


def prefill(client: redis.Redis, total: int) -> None:
    """Queue `total` no-op tasks for a drain, fast: not a measurement, so one message is
    published through Celery and copied with fresh ids (task id, correlation id, delivery tag)
    by a Redis pipeline, instead of minutes of `apply_async` on a loaded host."""
    client.delete(QUEUE)
    noop.delay()
    raw = client.lpop(QUEUE)  # one element (no count): bytes
    assert isinstance(raw, bytes | str)
    message = json.loads(text(raw))
    pipe = client.pipeline(transaction=False)
    for n in range(total):
        task_id = str(uuid.uuid4())
        message["headers"]["id"] = message["headers"]["root_id"] = task_id
        message["properties"]["correlation_id"] = task_id
        message["properties"]["delivery_tag"] = str(uuid.uuid4())
        pipe.lpush(QUEUE, json.dumps(message))
        if n % 1000 == 999:
            pipe.execute()
    pipe.execute()


def enqueue_rate(client: redis.Redis, name: str, total: int, batch: bool) -> float:
    """Tasks per second (host monotonic clock), checked by the queue's length."""
    reset(client)
    noop.delay()  # the producer connects (and declares the queue) before the clock starts
    client.delete(QUEUE)
    started = time.perf_counter()
    if batch:
        send_batch(total)
    else:
        for _ in range(total):
            noop.delay()
    elapsed = time.perf_counter() - started
    queued = int(client.llen(QUEUE))
    if queued != total:
        raise BenchError(f"{name} enqueue: expected {total} queued tasks, found {queued}")
    return total / elapsed


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def drain_counts(client: redis.Redis) -> tuple[int, float, float]:
    """Sum of the workers' counts, earliest start, latest end (bench:drain:<pid> hashes)."""
    total, first, last = 0, float("inf"), 0.0
    for key in client.keys("bench:drain:*"):
        row = {text(k): text(v) for k, v in client.hgetall(key).items()}
        total += int(row["count"])
        first = min(first, float(row["first"]))
        last = max(last, float(row["last"]))
    return total, first, last


def drain(
    client: redis.Redis, broker: str, workdir: Path, sizes: Sizes, processes: int
) -> dict[str, float]:
    """Prefill, spawn workers; rate = tasks / (last task end − first task start), over the
    whole queue or what finished within DRAIN_BUDGET_S."""
    total = sizes.drain
    reset(client)
    prefill(client, total)
    running = workers(broker, processes, workdir, sizes.drain_concurrency)
    spawned = time.time()
    running.start()
    done, last_change = -1, time.monotonic()
    deadline = time.monotonic() + DRAIN_BUDGET_S
    try:
        while True:
            time.sleep(POLL_S)
            running.check_alive()
            n, first, last = drain_counts(client)
            if n >= total or time.monotonic() > deadline:
                break
            if n != done:
                done, last_change = n, time.monotonic()
            elif time.monotonic() - last_change > STALL_TIMEOUT_S:
                raise BenchError(f"no task finished for {STALL_TIMEOUT_S:g} s ({n}/{total})")
        left = int(client.llen(QUEUE))
    finally:
        codes = running.stop()
    # Cut by the budget, tasks may still sit in the list or in a worker's prefetch (unacked).
    if n > total or (n == total and left):
        raise BenchError(f"drain: expected {total} tasks run once, got {n} ({left} left queued)")
    if any(code != 0 for code in codes):
        log(f"warning: worker exit codes {codes}")
    return {"per_s": n / (last - first), "wall_per_s": n / (last - spawned), "jobs": n}


def percentile(ordered: list[float], q: float) -> float:
    """PostgreSQL's percentile_cont (linear interpolation), as the other harnesses use."""
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def pickup(client: redis.Redis, broker: str, workdir: Path, sizes: Sizes) -> dict[str, float]:
    """Idle worker, warmed by one task; latency = task start − the moment before `delay`."""
    total = sizes.pickup
    reset(client)
    running = workers(broker, 1, workdir, sizes.pickup_concurrency)
    running.start()
    try:
        stamp.delay(time.time())
        deadline = time.monotonic() + STALL_TIMEOUT_S
        while client.llen("bench:pickup") < 1:
            running.check_alive()
            if time.monotonic() > deadline:
                raise BenchError("the pickup worker never ran its warm-up task")
            time.sleep(0.05)
        time.sleep(0.5)
        client.delete("bench:pickup")
        for _ in range(total):
            stamp.delay(time.time())
            time.sleep(sizes.pickup_gap_s)
        deadline = time.monotonic() + STALL_TIMEOUT_S
        while client.llen("bench:pickup") < total:
            running.check_alive()
            if time.monotonic() > deadline:
                raise BenchError(f"pickup: only {client.llen('bench:pickup')}/{total} ran")
            time.sleep(0.05)
    finally:
        running.stop()
    rows = [text(item).split() for item in client.lrange("bench:pickup", 0, -1)]
    ms = sorted((float(started) - float(sent)) * 1000 for sent, started in rows)
    if len(ms) != total:
        raise BenchError(f"pickup: expected {total} tasks, got {len(ms)}")
    return {
        "p50": percentile(ms, 0.50),
        "p95": percentile(ms, 0.95),
        "p99": percentile(ms, 0.99),
        "max": ms[-1],
    }


def one_run(
    client: redis.Redis, broker: str, workdir: Path, sizes: Sizes, prefix: str
) -> dict[str, float]:
    """Every scenario once, in jobyard bench's order."""
    numbers: dict[str, float] = {}
    log(f"{prefix}{sizes.single:,} single enqueues (delay)")
    numbers["enqueue_single_per_s"] = enqueue_rate(client, "single", sizes.single, False)
    log(f"{prefix}{sizes.batch:,} tasks by apply_async on one producer")
    numbers["enqueue_batch_per_s"] = enqueue_rate(client, "batch", sizes.batch, True)
    for processes in (1, 2):
        log(f"{prefix}drain {sizes.drain:,} no-op tasks with {processes} worker process(es)")
        result = drain(client, broker, workdir, sizes, processes)
        numbers[f"drain_{processes}proc_per_s"] = result["per_s"]
        numbers[f"drain_{processes}proc_wall_per_s"] = result["wall_per_s"]
        numbers[f"drain_{processes}proc_jobs"] = result["jobs"]
    log(f"{prefix}pickup latency of {sizes.pickup} tasks to an idle worker")
    latency = pickup(client, broker, workdir, sizes)
    numbers.update(
        pickup_p50_ms=latency["p50"],
        pickup_p95_ms=latency["p95"],
        pickup_p99_ms=latency["p99"],
        pickup_max_ms=latency["max"],
    )
    return numbers


def measure(
    broker: str, workdir: Path, setup: dict[str, Any], runs: int, quick: bool
) -> dict[str, Any]:
    sizes = Sizes.from_dict(setup["sizes"])
    client = redis.Redis.from_url(broker)
    info = client.info("server")
    details: dict[str, Any] = {
        "sizes": asdict(sizes),
        "redis_version": info.get("redis_version"),
        "persistence": "none (save '', appendonly no)",
        "worker": [*WORKER_FLAGS, "--without-heartbeat"],
        "python": platform.python_version(),
        "kombu_version": version("kombu"),
        "redis_py_version": version("redis"),
        "loadavg_before": loadavg(),
    }
    assert app.conf.task_ignore_result
    every = [
        one_run(client, broker, workdir, sizes, f"run {n}/{runs}: ") for n in range(1, runs + 1)
    ]
    details["loadavg_after"] = loadavg()
    return result_object(
        every,
        peer="Celery",
        version=version("celery"),
        runs=runs,
        quick=quick,
        machine=setup["machine"],
        harness="benchmarks/peers/celery",
        details=details,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", required=True, help="redis:// URL of the peer's broker")
    parser.add_argument("--workdir", required=True, type=Path, help="worker logs go here")
    parser.add_argument("--setup", required=True, help="jobyard's sizes and machine, as JSON")
    parser.add_argument("--runs", type=int, default=1, help="repeat; report medians")
    parser.add_argument("--quick", action="store_true", help="the sizes are jobyard's QUICK")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = measure(args.broker, args.workdir, json.loads(args.setup), args.runs, args.quick)
    except BenchError as exc:
        sys.exit(f"[celery bench] error: {exc}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
