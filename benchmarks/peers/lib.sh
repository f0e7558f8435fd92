# Shared by the peer drivers benchmarks/peers/{procrastinate,celery}/run.sh (sourced, not run):
# arguments, the peer's throwaway venv, jobyard's sizes and machine description, the output.
# The caller sets PEER (directory name) and HERE (its directory) before sourcing, starts its own
# server, runs its bench.py with "${quick[@]}" --runs "$runs" --setup "$setup", and passes the
# JSON it prints to emit_result.

ROOT=$(cd "$HERE/../../.." && pwd)
WORK=$ROOT/.jobyard/peers/$PEER
VENV=$WORK/venv
JOBYARD=$ROOT/.venv/bin/jobyard
UV=${UV:-$ROOT/.tools/bin/uv}
PYTHON=${PYTHON:-python3}
export UV_PYTHON_DOWNLOADS=never

log() { echo "[$PEER run.sh] $*" >&2; }
die() { echo "[$PEER run.sh] error: $*" >&2; exit 2; }

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
# One run at a time: every run re-creates the same databases (or broker).
exec 9>"$WORK/.run.lock"
flock -n 9 || die "another $PEER benchmark is running (lock $WORK/.run.lock)"

if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$HERE/requirements.txt" "$VENV/.requirements.txt"; then
    log "installing $HERE/requirements.txt into $VENV"
    rm -rf "$VENV"
    "$UV" venv --quiet --no-config --python "$PYTHON" "$VENV" >&2
    # Byte-compiled at install, as jobyard's .venv is (worker start-up under
    # PYTHONDONTWRITEBYTECODE would otherwise recompile the peer).
    "$UV" pip install --quiet --no-config --compile-bytecode --python "$VENV/bin/python" \
        -r "$HERE/requirements.txt" >&2
    cp "$HERE/requirements.txt" "$VENV/.requirements.txt"
fi

# jobyard's own sizes (harness.FULL, or QUICK with --quick) and its description of this machine;
# bench.py cannot import jobyard (another venv).
setup=$("$ROOT/.venv/bin/python" -c '
import dataclasses, json, sys
from jobyard.benchmarks import harness
sizes = harness.QUICK if "--quick" in sys.argv else harness.FULL
print(json.dumps({"sizes": dataclasses.asdict(sizes), "machine": harness.machine_info()}))
' "${quick[@]}")

emit_result() {
    if [ -n "$output" ]; then
        mkdir -p "$(dirname "$output")"
        printf '%s\n' "$1" >"$output.tmp"
        mv "$output.tmp" "$output"
        log "wrote $output"
    fi
    printf '%s\n' "$1"
}
