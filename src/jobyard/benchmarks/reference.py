"""The PgQueuer column of `jobyard bench`: the issue's figures, or PgQueuer measured here.

Without `--reference` the column holds the figures the issue quotes for PgQueuer 1.6, measured
on another machine. `jobyard bench --reference FILE` takes them from the JSON object that
`make bench-peers` writes to .jobyard/peers/pgqueuer.json (benchmarks/peers/README.md): PgQueuer
measured on this machine by the same scenarios, so the ratios compare queues, not machines.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from jobyard.benchmarks.harness import JSON_KEYS, machine_info
from jobyard.domain.errors import JobyardError

# Besides JSON_KEYS, numbers a peer file may hold under jobyard's metric names (report.METRICS).
OPTIONAL_KEYS: Final = ("drain_1proc_wall_per_s", "drain_2proc_wall_per_s", "pickup_max_ms")
# What must match for a peer file to count as measured on this machine (harness.machine_info).
SAME_MACHINE_KEYS: Final = ("cpu", "cores", "memory_gib", "os")
# Where the peer file comes from.
PEER_COMMAND: Final = "make bench-peers"
DEFAULT_PATH: Final = ".jobyard/peers/pgqueuer.json"


@dataclass(frozen=True)
class Reference:
    label: str  # the column's header
    numbers: Mapping[str, float]  # by metric key; a metric without one shows "—"
    source: str  # where the numbers came from, one sentence for the report


QUOTED: Final = Reference(
    label="PgQueuer 1.6",
    numbers={
        "enqueue_single_per_s": 2_400,
        "enqueue_batch_per_s": 72_000,
        "drain_1proc_per_s": 17_000,
        "drain_2proc_per_s": 21_000,
        "pickup_p50_ms": 3.2,
    },
    source=(
        "quoted in the issue, measured on another machine, so the ratios compare machines as "
        f"much as queues (`make bench` measures PgQueuer here first, with `{PEER_COMMAND}`)"
    ),
)


class ReferenceFileError(JobyardError):
    """The reference file cannot be used."""

    code = "reference_file_error"

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def load(path: Path, *, machine: Mapping[str, Any] | None = None) -> Reference:
    """Read and check a `make bench-peers` file; `machine` is this one (harness.machine_info)."""
    regenerate = f"regenerate it with `{PEER_COMMAND}` (it writes {DEFAULT_PATH})"
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReferenceFileError(
            f"cannot read the reference file {path}: {exc.strerror or exc}",
            f"measure PgQueuer on this machine with `{PEER_COMMAND}` (it writes {DEFAULT_PATH})",
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReferenceFileError(
            f"the reference file {path} is not JSON ({exc})", regenerate
        ) from None
    if not isinstance(data, dict):
        raise ReferenceFileError(f"the reference file {path} is not a JSON object", regenerate)

    numbers: dict[str, float] = {}
    for key in (*JSON_KEYS, *OPTIONAL_KEYS):
        if key not in data:
            if key in OPTIONAL_KEYS:
                continue
            raise ReferenceFileError(f'the reference file {path} has no "{key}"', regenerate)
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ReferenceFileError(
                f'"{key}" in the reference file {path} is {value!r}, not a positive number',
                regenerate,
            )
        numbers[key] = float(value)

    version = data.get("version")
    if not isinstance(version, str) or not version:
        raise ReferenceFileError(f'the reference file {path} has no "version"', regenerate)
    try:
        measured_at = datetime.fromisoformat(str(data.get("measured_at")))
    except ValueError:
        raise ReferenceFileError(
            f'the reference file {path} has no "measured_at" time (ISO 8601)', regenerate
        ) from None

    peer = str(data.get("peer") or "PgQueuer")
    measured_on = data.get("machine")
    here = machine if machine is not None else machine_info()
    if isinstance(measured_on, dict) and all(
        measured_on.get(key) == here.get(key) for key in SAME_MACHINE_KEYS
    ):
        where = "on this machine"
    elif isinstance(measured_on, dict):
        where = (
            f"on another machine ({measured_on.get('cpu')}, {measured_on.get('cores')} cores, "
            f"{measured_on.get('os')})"
        )
    else:
        where = "on an unknown machine"
    when = (
        f"{measured_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
        if measured_at.tzinfo
        else f"{measured_at:%Y-%m-%d %H:%M}"
    )
    runs = data.get("runs")
    median = f", median of {runs} runs" if isinstance(runs, int) and runs > 1 else ""
    source = (
        f"measured {where} at {when} by `{PEER_COMMAND}` ({peer} {version}{median}; "
        f"benchmarks/peers/README.md), read from {path}"
    )
    if data.get("quick"):
        source += "; a `--quick` smoke run with tiny sizes, not a measurement"
    return Reference(label=f"{peer} {version}", numbers=numbers, source=source)
