#!/usr/bin/env bash
# Procrastinate peer benchmark: the scenarios of `jobyard bench`, measured for Procrastinate on
# this machine (benchmarks/peers/README.md).
#
#   benchmarks/peers/procrastinate/run.sh [--quick] [--runs N] [--output FILE]
#
# Builds (first time, or when requirements.txt changes) the venv .jobyard/peers/procrastinate/venv,
# starts a dedicated embedded PostgreSQL in .jobyard/peers/procrastinate/pgdata with
# `jobyard db url --data-dir` (the same binaries and settings as jobyard's bench server, as the
# PgQueuer peer does), runs bench.py (3 runs and medians, or 1 tiny run with --quick), stops the
# server and prints ONE JSON object on stdout (also written to FILE with --output).
set -euo pipefail
PEER=procrastinate
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

log "starting PostgreSQL in $WORK/pgdata"
url=$(env -u DATABASE_URL -u JOBYARD_DATABASE_URL "$JOBYARD" db url --data-dir "$WORK")
stop_server() { "$JOBYARD" db stop --data-dir "$WORK" >&2 || true; }
trap stop_server EXIT

result=$(PYTHONPATH="$HERE/..:$HERE" "$VENV/bin/python" "$HERE/bench.py" --url "$url" \
    --workdir "$WORK" --setup "$setup" --runs "$runs" "${quick[@]}")
emit_result "$result"
