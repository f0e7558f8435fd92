"""The peer columns of `jobyard bench`: the issue's PgQueuer figures, or peers measured here.

Without a peer the column holds the figures the issue quotes for PgQueuer 1.6, measured on
another machine. `jobyard bench --reference FILE` takes them from the JSON object that
`make bench-peers` writes to .jobyard/peers/pgqueuer.json (benchmarks/peers/README.md): PgQueuer
measured on this machine by the same scenarios, so the ratios compare queues, not machines.
`jobyard bench --peer-command CMD` (what `make bench` uses) runs the peer's benchmark once just
before each of its own runs, so a shared host's slow minutes fall on both alike; given several
times (PgQueuer, Procrastinate, Celery, the pgbench ceiling: `make bench`), each peer gets its own
column and runs in turn before each of jobyard's rounds.
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
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
# What `make bench` passes as --peer-command.
INTERLEAVED_EXAMPLE: Final = "benchmarks/peers/pgqueuer/run.sh --runs 1"


@dataclass(frozen=True)
class Reference:
    label: str  # the column's header
    numbers: Mapping[str, float]  # by metric key; a metric without one shows "—"
    source: str  # where the numbers came from, one sentence for the report
    name: str = ""  # the ratio column's "vs <name>"; default: the label's first word

    @property
    def short(self) -> str:
        return self.name or self.label.split(" ", 1)[0]


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
    result = parse(data, f"the reference file {path}", regenerate, machine=machine)
    median = f", median of {result.runs} runs" if result.runs > 1 else ""
    source = (
        f"measured {result.where} at {result.when} by `{PEER_COMMAND}` ({result.label}{median}; "
        f"benchmarks/peers/README.md), read from {path}"
    )
    if result.quick:
        source += "; a `--quick` smoke run with tiny sizes, not a measurement"
    return Reference(label=result.label, numbers=result.numbers, source=source, name=result.peer)


@dataclass(frozen=True)
class PeerResult:
    """One checked peer measurement (a `make bench-peers` file or a peer command's output)."""

    peer: str  # "PgQueuer"
    label: str  # "PgQueuer 1.6.0"
    numbers: Mapping[str, float]
    where: str  # "on this machine", or which other one
    when: str
    runs: int
    quick: bool


def parse(
    data: Any, origin: str, regenerate: str, *, machine: Mapping[str, Any] | None = None
) -> PeerResult:
    """Check a peer's JSON object; `origin` names it in errors ("the reference file …")."""
    if not isinstance(data, dict):
        raise ReferenceFileError(f"{origin} is not a JSON object", regenerate)

    # A peer may leave out scenarios that do not apply to it, but must say which (the pgbench
    # ceiling has only the drains): a number missing without that is an error.
    skipped = data.get("not_applicable", [])
    if not isinstance(skipped, list) or not all(key in JSON_KEYS for key in skipped):
        raise ReferenceFileError(
            f'"not_applicable" in {origin} must list keys among {", ".join(JSON_KEYS)}',
            regenerate,
        )
    if len(set(skipped)) == len(JSON_KEYS):
        raise ReferenceFileError(f"{origin} has no number at all", regenerate)

    numbers: dict[str, float] = {}
    for key in (*JSON_KEYS, *OPTIONAL_KEYS):
        if key not in data:
            if key in OPTIONAL_KEYS or key in skipped:
                continue
            raise ReferenceFileError(f'{origin} has no "{key}"', regenerate)
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ReferenceFileError(
                f'"{key}" in {origin} is {value!r}, not a positive number', regenerate
            )
        numbers[key] = float(value)

    version = data.get("version")
    if not isinstance(version, str) or not version:
        raise ReferenceFileError(f'{origin} has no "version"', regenerate)
    try:
        measured_at = datetime.fromisoformat(str(data.get("measured_at")))
    except ValueError:
        raise ReferenceFileError(
            f'{origin} has no "measured_at" time (ISO 8601)', regenerate
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
    return PeerResult(
        peer=peer,
        label=f"{peer} {version}",
        numbers=numbers,
        where=where,
        when=when,
        runs=runs if isinstance(runs, int) and runs > 0 else 1,
        quick=bool(data.get("quick")),
    )


class PeerCommand:
    """Runs the peer's benchmark once before each of jobyard's runs (`--peer-command`), so that
    the two take turns on the machine and a slow minute of a shared host falls on both."""

    def __init__(self, command: str, *, machine: Mapping[str, Any] | None = None) -> None:
        self.command = command
        self._argv = shlex.split(command)
        if not self._argv:
            raise ReferenceFileError(
                "the peer command is empty", f"e.g. --peer-command '{INTERLEAVED_EXAMPLE}'"
            )
        self._machine = machine
        self.results: list[PeerResult] = []

    def run_once(self) -> None:
        origin = f"the output of `{self.command}`"
        hint = f"run `{self.command}` by itself to see why (benchmarks/peers/README.md)"
        try:
            done = subprocess.run(  # noqa: S603 - the operator's own command line
                self._argv, stdout=subprocess.PIPE, text=True, check=False
            )
        except OSError as exc:
            raise ReferenceFileError(
                f"cannot run the peer command `{self.command}`: {exc.strerror or exc}", hint
            ) from None
        if done.returncode != 0:
            raise ReferenceFileError(
                f"the peer command `{self.command}` failed (exit {done.returncode})", hint
            )
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        try:
            data: Any = json.loads(lines[-1]) if lines else None
        except json.JSONDecodeError as exc:
            raise ReferenceFileError(f"{origin} is not JSON ({exc})", hint) from None
        self.results.append(parse(data, origin, hint, machine=self._machine))

    def reference(self) -> Reference:
        """The median of the peer's runs, as the report's column."""
        if not self.results:
            raise ReferenceFileError("the peer command never ran", f"e.g. {INTERLEAVED_EXAMPLE}")
        first = self.results[0]
        keys = [k for k in first.numbers if all(k in r.numbers for r in self.results)]
        numbers = {k: statistics.median(r.numbers[k] for r in self.results) for k in keys}
        n = len(self.results)
        source = (
            f"measured {first.where} by `{self.command}`, one run just before each of jobyard's "
            f"(interleaved, so both meet the same load of a shared host; {first.label}, "
            f"median of {n} run{'s' if n > 1 else ''}; benchmarks/peers/README.md)"
        )
        if any(r.quick for r in self.results):
            source += "; a `--quick` smoke run with tiny sizes, not a measurement"
        return Reference(label=first.label, numbers=numbers, source=source, name=first.peer)


class PeerCommands:
    """Several `--peer-command`s: each runs once, in the order given, before each of jobyard's
    runs; each becomes its own column."""

    def __init__(self, commands: list[str], *, machine: Mapping[str, Any] | None = None) -> None:
        self.peers = [PeerCommand(command, machine=machine) for command in commands]

    def run_once(self) -> None:
        for peer in self.peers:
            peer.run_once()

    def references(self) -> list[Reference]:
        return [peer.reference() for peer in self.peers]
