#!/usr/bin/env bash
# Celery peer benchmark (Redis broker): the scenarios of `jobyard bench` that apply to Celery,
# measured on this machine (benchmarks/peers/README.md).
#
#   benchmarks/peers/celery/run.sh [--quick] [--runs N] [--output FILE]
#
# Builds (first time, or when requirements.txt changes) the venv .jobyard/peers/celery/venv,
# starts Debian's redis-server on a free port of 127.0.0.1 with no persistence (no RDB, no AOF),
# runs bench.py (3 runs and medians, or 1 tiny run with --quick), stops the server and prints ONE
# JSON object on stdout (also written to FILE with --output).
set -euo pipefail
PEER=celery
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

REDIS_SERVER=${REDIS_SERVER:-redis-server}
command -v "$REDIS_SERVER" >/dev/null || die "redis-server is missing (Debian: apt-get install redis-server)"
port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log "starting redis-server on 127.0.0.1:$port (no persistence)"
"$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no \
    --dir "$WORK" --logfile "$WORK/redis.log" &
redis_pid=$!
stop_server() { kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; }
trap stop_server EXIT
broker="redis://127.0.0.1:$port/0"
for _ in $(seq 50); do
    "$VENV/bin/python" -c 'import redis, sys; redis.Redis.from_url(sys.argv[1]).ping()' "$broker" \
        2>/dev/null && break
    sleep 0.1
done

result=$(PYTHONPATH="$HERE/..:$HERE" CELERY_BENCH_BROKER="$broker" "$VENV/bin/python" \
    "$HERE/bench.py" --broker "$broker" --workdir "$WORK" --setup "$setup" --runs "$runs" \
    "${quick[@]}")
emit_result "$result"
