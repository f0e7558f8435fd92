"""The EXPLAIN harness: measures the claim and every hinted named query, writes docs/EXPLAIN.md.

It runs on a throwaway database (a clone of the migrated template), fills `jobs` with a
realistic shape (mostly finished rows, ~5% claimable), and EXPLAINs the real `job_claim_batch`
under several index configurations. Every run happens inside a transaction that is rolled back,
so configurations (dropped indexes) and the claim's own writes never leak between runs.

Named queries opt in with a hint line right after their description line:

    -- name: queue_get_by_name
    -- The queue of a project with this name.
    -- explain: {"project_id": "$project_id", "name": "$queue_name"}

The JSON object gives the query's parameters. A string starting with `$` names a value the
harness seeded (see FIXTURES); objects are passed as jsonb, lists as arrays, null as NULL.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from jobyard.db import testing
from jobyard.db.pool import SyncConn, connect_sync
from jobyard.db.queries import QUERIES, Query
from jobyard.db.urls import database_name
from jobyard.domain.errors import JobyardError

CLAIM_QUERY = "job_claim_batch"
EXPLAIN_PREFIX = "jy_explain_"
DEFAULT_ROWS = 100_000
DEFAULT_RUNS = 11
QUEUE_COUNT = 4
# The claim's parameters when job_claim_batch carries no hint of its own.
DEFAULT_CLAIM_PARAMS: dict[str, Any] = {
    "queue_id": "$queue_id",
    "worker_id": "$worker_id",
    "n": 10,
    "lease_s": 30.0,
    "start": True,
    "solo": False,
    "limited": False,
    "now": None,
}
FIXTURES = (
    "org_id",
    "user_id",
    "project_id",
    "queue_id",
    "queue_name",
    "worker_id",
    "job_id",
    "parent_job_id",
)

_HINT = re.compile(r"^--\s*explain:\s*(.*?)\s*$", re.MULTILINE)
_PARAM = re.compile(r"%\((\w+)\)s")
_ORDER_BY = re.compile(r"ORDER BY [^\n]+")
# Priority aging: one priority point per minute waited. No index can supply this order.
_AGING_ORDER = "ORDER BY r.priority + extract(epoch FROM now() - r.run_at) / 60.0 DESC, r.job_id"
_STATEMENT_TIMEOUT = "120s"

Progress = Callable[[str], None]


class ExplainError(JobyardError):
    """The EXPLAIN harness cannot run."""


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class PlanStats:
    """What one EXPLAIN (ANALYZE, BUFFERS) says about a plan (or the part of it we measure)."""

    planning_ms: float
    execution_ms: float
    # The measured subtree's own time: the picking CTE for the claim, the whole plan otherwise.
    subtree_ms: float
    rows_returned: int
    # Tuples the table scans touched: rows they returned plus rows their filters threw away.
    rows_read: int
    shared_hit: int
    shared_read: int
    has_sort: bool
    node_path: tuple[str, ...]
    indexes: tuple[str, ...]


@dataclass(frozen=True)
class Measurement:
    key: str
    label: str
    runs: int
    stats: PlanStats | None
    error: str | None = None

    @property
    def ok(self) -> PlanStats:
        if self.stats is None:
            raise ExplainError(f"{self.key} has no plan: {self.error}")
        return self.stats


@dataclass(frozen=True)
class MachineInfo:
    cpu: str
    cores: int
    memory: str
    os: str
    python: str
    server: str
    settings: dict[str, str]


@dataclass(frozen=True)
class ExplainReport:
    rows: int
    claimable: int
    claimable_in_queue: int
    limit: int
    runs: int
    claim: tuple[Measurement, ...]
    queries: tuple[Measurement, ...]
    machine: MachineInfo
    generated_at: datetime
    skipped: tuple[str, ...] = field(default=())

    def claim_config(self, key: str) -> Measurement:
        for m in self.claim:
            if m.key == key:
                return m
        raise KeyError(key)


# ----------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class ClaimConfig:
    key: str
    label: str
    setup: tuple[LiteralString, ...] = ()
    drop_all_indexes: bool = False
    order_by: str | None = None


# The claim reads job_ready (migration 0012); its claim index is partitioned, and dropping the
# parent's index drops each partition's.
CLAIM_CONFIGS: tuple[ClaimConfig, ...] = (
    ClaimConfig("full", "Full claim index (as migrated)"),
    ClaimConfig(
        "no_id_tiebreak",
        "Claim index without the id tiebreak",
        (
            "DROP INDEX job_ready_claim_idx",
            "CREATE INDEX job_ready_claim_noid_idx ON job_ready (queue_id, (- priority), run_at)",
        ),
    ),
    ClaimConfig(
        "descending",
        "Claim index on priority DESC (the same order, but not the ORDER BY's expression)",
        (
            "DROP INDEX job_ready_claim_idx",
            "CREATE INDEX job_ready_claim_desc_idx ON job_ready"
            " (queue_id, priority DESC, run_at, job_id)",
        ),
    ),
    ClaimConfig("dropped", "Claim index dropped", ("DROP INDEX job_ready_claim_idx",)),
    ClaimConfig("no_indexes", "No indexes on jobs and job_ready", drop_all_indexes=True),
    ClaimConfig("aging", "Priority aging ORDER BY (full indexes)", order_by=_AGING_ORDER),
    # The as-migrated claim once more, last: shows no configuration leaked into the next.
    ClaimConfig("full_again", "Full claim index, again after the others"),
)


# ----------------------------------------------------------------------------- plan reading


def _nodes(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _label(node: Mapping[str, Any]) -> str:
    kind = str(node["Node Type"])
    if "Index Name" in node:
        return f"{kind} ({node['Index Name']})"
    if "Relation Name" in node:
        return f"{kind} ({node['Relation Name']})"
    if "CTE Name" in node:
        return f"{kind} ({node['CTE Name']})"
    return kind


def _main_path(node: Mapping[str, Any]) -> tuple[str, ...]:
    """The chain from the root down the outer side, skipping init plans and sub plans."""
    path = [_label(node)]
    while True:
        children = [
            c
            for c in node.get("Plans", ())
            if c.get("Parent Relationship") not in ("InitPlan", "SubPlan")
        ]
        if not children:
            return tuple(path)
        node = children[0]
        path.append(_label(node))


def _rows_read(root: Mapping[str, Any]) -> int:
    total = 0.0
    for node in _nodes(root):
        if "Relation Name" not in node:
            continue  # joins, sorts, limits and bitmap index scans read no table rows
        loops = float(node.get("Actual Loops", 1))
        per_loop = (
            float(node.get("Actual Rows", 0))
            + float(node.get("Rows Removed by Filter", 0))
            + float(node.get("Rows Removed by Index Recheck", 0))
        )
        total += per_loop * loops
    return round(total)


def find_subplan(plan: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The node whose Subplan Name is `name` (e.g. "CTE picked"), if any."""
    for node in _nodes(plan):
        if node.get("Subplan Name") == name:
            return node
    return None


def plan_stats(explained: Mapping[str, Any], subtree: str | None = None) -> PlanStats:
    """Summarize one EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) result (the list's first item)."""
    plan: Mapping[str, Any] = explained["Plan"]
    root = plan
    if subtree is not None:
        found = find_subplan(plan, subtree)
        if found is None:
            raise ExplainError(f"the plan has no {subtree!r} node; did the query change shape?")
        root = found
    nodes = list(_nodes(root))
    return PlanStats(
        planning_ms=float(explained.get("Planning Time", 0.0)),
        execution_ms=float(explained.get("Execution Time", 0.0)),
        subtree_ms=float(root.get("Actual Total Time", 0.0)),
        rows_returned=round(float(root.get("Actual Rows", 0)) * float(root.get("Actual Loops", 1))),
        rows_read=_rows_read(root),
        shared_hit=int(root.get("Shared Hit Blocks", 0)),
        shared_read=int(root.get("Shared Read Blocks", 0)),
        has_sort=any("Sort" in str(n["Node Type"]) for n in nodes),
        node_path=_main_path(root),
        indexes=tuple(sorted({str(n["Index Name"]) for n in nodes if "Index Name" in n})),
    )


def _median(samples: list[PlanStats]) -> PlanStats:
    """Median timings; shape and counts from the last (warm) run, which they do not vary by."""
    last = samples[-1]
    return replace(
        last,
        planning_ms=statistics.median(s.planning_ms for s in samples),
        execution_ms=statistics.median(s.execution_ms for s in samples),
        subtree_ms=statistics.median(s.subtree_ms for s in samples),
    )


# ----------------------------------------------------------------------------- hints


def explain_hint(query: Query) -> dict[str, Any] | None:
    """The parameters of a query's `-- explain: {json}` line, or None when it has none."""
    found = _HINT.findall(query.sql)
    if not found:
        return None
    if len(found) > 1:
        raise ExplainError(f"{query.name} ({query.source}) has more than one `-- explain:` line")
    try:
        params = json.loads(found[0])
    except json.JSONDecodeError as exc:
        raise ExplainError(
            f"{query.name} ({query.source}): the `-- explain:` line is not JSON: {exc.msg}"
        ) from None
    if not isinstance(params, dict):
        raise ExplainError(
            f"{query.name} ({query.source}): the `-- explain:` hint must be an object"
        )
    # Parameters named like a fixture (queue_id, …) and `now` are filled in by the harness.
    implicit = {f: "$" + f for f in FIXTURES if f.endswith("_id")} | {"now": None}
    needed = set(_PARAM.findall(query.sql))
    missing = sorted(needed - set(params) - set(implicit))
    if missing:
        raise ExplainError(
            f"{query.name} ({query.source}): the `-- explain:` hint lacks {', '.join(missing)}"
        )
    return {k: v for k, v in implicit.items() if k in needed} | params


def bind(query_name: str, hint: Mapping[str, Any], fixtures: Mapping[str, Any]) -> dict[str, Any]:
    """Hint values ready for psycopg: `$name` → seeded value (in lists too), objects → jsonb."""

    def value_of(key: str, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("$"):
            if value[1:] not in fixtures:
                raise ExplainError(
                    f"{query_name}: explain hint {key!r} names unknown fixture {value!r}; "
                    f"known: {', '.join('$' + f for f in sorted(fixtures))}"
                )
            return fixtures[value[1:]]
        if isinstance(value, dict):
            return Jsonb(value)
        if isinstance(value, list):
            return [value_of(key, item) for item in value]
        return value

    return {key: value_of(key, value) for key, value in hint.items()}


def _hinted_queries() -> list[tuple[Query, dict[str, Any]]]:
    hinted = []
    for name in sorted(QUERIES):
        hint = explain_hint(QUERIES[name])
        if hint is not None:
            hinted.append((QUERIES[name], hint))
    return hinted


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Seeded:
    fixtures: dict[str, Any]
    claimable: int
    claimable_in_queue: int


def seed(conn: SyncConn, rows: int) -> Seeded:
    """One project with four queues and `rows` jobs: ~5% queued, ~2% scheduled, ~1% failed."""
    with conn.transaction():
        org = _one(conn, "INSERT INTO organizations (name, slug) VALUES ('EXPLAIN', 'explain')")
        user = _one(
            conn,
            "INSERT INTO users (email, password_hash) VALUES ('explain@jobyard.test', 'x')",
        )
        conn.execute(
            "INSERT INTO organization_members (org_id, user_id, role) VALUES (%s, %s, 'owner')",
            (org, user),
        )
        project = _one(
            conn,
            "INSERT INTO projects (org_id, name, slug) VALUES (%s, 'EXPLAIN', 'explain')",
            (org,),
        )
        queue_ids = [
            _one(conn, "INSERT INTO queues (project_id, name) VALUES (%s, %s)", (project, f"q{i}"))
            for i in range(1, QUEUE_COUNT + 1)
        ]
        worker = _one(
            conn,
            "INSERT INTO workers (project_id, name, concurrency) VALUES (%s, 'explain', 10)",
            (project,),
        )
        # Deterministic spread: statuses by g, queues by g/7, priorities and ages by hashes of g.
        conn.execute(
            """
            INSERT INTO jobs (project_id, queue_id, handler, payload, status, priority, run_at,
                              finished_at)
            SELECT %(project)s, (%(queues)s::bigint[])[1 + (g / 7) %% %(nq)s], 'explain.noop',
                   jsonb_build_object('n', g), s.status, ((g * 7919) %% 11) - 5,
                   CASE WHEN s.status = 'scheduled' THEN now() + interval '1 hour'
                        ELSE now() - make_interval(secs => (g * 104729) %% 86400) END,
                   CASE WHEN s.status = 'done' THEN now() END
            FROM generate_series(1::bigint, %(rows)s) AS g,
                 LATERAL (SELECT CASE WHEN g %% 20 = 0 THEN 'queued'::job_status
                                      WHEN g %% 50 = 1 THEN 'scheduled'::job_status
                                      WHEN g %% 100 = 3 THEN 'failed'::job_status
                                      ELSE 'done'::job_status END AS status) AS s
            """,
            {"project": project, "queues": queue_ids, "nq": QUEUE_COUNT, "rows": rows},
        )
        counts = conn.execute(
            """SELECT count(*) AS claimable,
                      count(*) FILTER (WHERE queue_id = %s) AS in_queue,
                      min(id) FILTER (WHERE queue_id = %s) AS job_id,
                      max(id) FILTER (WHERE queue_id = %s) AS parent_job_id
               FROM jobs WHERE status = 'queued'""",
            (queue_ids[0], queue_ids[0], queue_ids[0]),
        ).fetchone()
        assert counts is not None
    conn.execute("VACUUM ANALYZE jobs, job_ready")
    fixtures = {
        "org_id": org,
        "user_id": user,
        "project_id": project,
        "queue_id": queue_ids[0],
        "queue_name": "q1",
        "worker_id": worker,
        "job_id": counts["job_id"],
        "parent_job_id": counts["parent_job_id"],
    }
    return Seeded(fixtures, int(counts["claimable"]), int(counts["in_queue"]))


def _one(conn: SyncConn, insert: LiteralString, params: tuple[Any, ...] = ()) -> int:
    row = conn.execute(insert + " RETURNING id", params).fetchone()
    assert row is not None
    return int(row["id"])


# ----------------------------------------------------------------------------- measuring


@contextmanager
def _rolled_back(conn: SyncConn) -> Iterator[None]:
    """A transaction (or savepoint) that always rolls back."""
    with conn.transaction(force_rollback=True):
        yield


def _explain_once(conn: SyncConn, text: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
    # The text is a packaged named query or a harness constant, never user input.
    statement = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text
    with _rolled_back(conn):
        row = conn.execute(statement, params).fetchone()
    assert row is not None
    plan = row["QUERY PLAN"]
    if isinstance(plan, str):
        plan = json.loads(plan)
    result: Mapping[str, Any] = plan[0]
    return result


def measure(
    conn: SyncConn,
    text: str,
    params: Mapping[str, Any],
    runs: int,
    subtree: str | None = None,
) -> PlanStats:
    """Median of `runs` EXPLAIN ANALYZE runs after one warm-up, each rolled back."""
    _explain_once(conn, text, params)
    samples = [plan_stats(_explain_once(conn, text, params), subtree) for _ in range(runs)]
    return _median(samples)


def _drop_all_indexes(conn: SyncConn) -> None:
    """Drop every index on jobs (constraint-backed ones, pkey and unique, with their
    dependants) and on job_ready (a partitioned index takes its partitions' with it)."""
    rows = conn.execute(
        """SELECT i.indexrelid::regclass::text AS index_name, c.conname,
                  i.indrelid::regclass::text AS table_name
           FROM pg_index i
           LEFT JOIN pg_constraint c
             ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid AND c.contype IN ('p', 'u')
           WHERE i.indrelid IN ('jobs'::regclass, 'job_ready'::regclass)"""
    ).fetchall()
    for row in rows:
        if row["conname"]:
            conn.execute(
                pgsql.SQL("ALTER TABLE {} DROP CONSTRAINT {} CASCADE").format(
                    pgsql.Identifier(row["table_name"]), pgsql.Identifier(row["conname"])
                )
            )
        else:
            conn.execute(pgsql.SQL("DROP INDEX {}").format(pgsql.Identifier(row["index_name"])))


def claim_text(config: ClaimConfig) -> str:
    text: str = QUERIES[CLAIM_QUERY].sql
    if config.order_by is None:
        return text
    if _ORDER_BY.search(text) is None:
        raise ExplainError(f"{CLAIM_QUERY} has no ORDER BY line to replace for {config.key!r}")
    # Every ORDER BY of the claim (suspects and the rest share one order).
    return _ORDER_BY.sub(config.order_by, text)


def measure_claim(
    conn: SyncConn, config: ClaimConfig, params: Mapping[str, Any], runs: int
) -> Measurement:
    """The claim under one index configuration, applied inside a rolled-back transaction."""
    with _rolled_back(conn):
        for ddl in config.setup:
            conn.execute(ddl)
        if config.drop_all_indexes:
            _drop_all_indexes(conn)
        stats = measure(conn, claim_text(config), params, runs, subtree="CTE picked")
    return Measurement(config.key, config.label, runs, stats)


def measure_query(
    conn: SyncConn, query: Query, hint: Mapping[str, Any], fixtures: Mapping[str, Any], runs: int
) -> Measurement:
    """One hinted named query; a failing query is reported, not fatal to the harness."""
    params = bind(query.name, hint, fixtures)
    try:
        stats = measure(conn, query.sql, params, runs)
    except psycopg.Error as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        state = exc.sqlstate or type(exc).__name__
        return Measurement(query.name, query.source, runs, None, f"{state}: {message}")
    return Measurement(query.name, query.source, runs, stats)


def machine_info(conn: SyncConn) -> MachineInfo:
    cpu = platform.processor() or platform.machine()
    memory = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass  # not Linux: keep what platform knows
    settings: dict[str, str] = {}
    for name in (
        "shared_buffers",
        "work_mem",
        "random_page_cost",
        "jit",
        "max_parallel_workers_per_gather",
    ):
        row = conn.execute("SELECT current_setting(%s) AS value", (name,)).fetchone()
        settings[name] = str(row["value"]) if row else "?"
    version = conn.execute("SHOW server_version").fetchone()
    return MachineInfo(
        cpu=cpu,
        cores=os.cpu_count() or 0,
        memory=memory,
        os=f"{platform.system()} {platform.release()}",
        python=sys.version.split()[0],
        server=str(version["server_version"]) if version else "?",
        settings=settings,
    )


def run_on(
    url: str,
    *,
    rows: int = DEFAULT_ROWS,
    runs: int = DEFAULT_RUNS,
    progress: Progress | None = None,
) -> ExplainReport:
    """Seed the (throwaway, migrated) database at `url` and measure everything."""
    say = progress or (lambda _message: None)
    if rows < 100 or runs < 1:
        raise ExplainError("rows must be at least 100 and runs at least 1")
    with connect_sync(url, autocommit=True) as conn:
        conn.execute(
            pgsql.SQL("SET statement_timeout = {}").format(pgsql.Literal(_STATEMENT_TIMEOUT))
        )
        say(f"seeding {rows:,} jobs")
        seeded = seed(conn, rows)
        say(f"{seeded.claimable:,} claimable, {seeded.claimable_in_queue:,} in the claimed queue")

        hinted = _hinted_queries()
        claim_hint = next((h for q, h in hinted if q.name == CLAIM_QUERY), DEFAULT_CLAIM_PARAMS)
        claim_params = bind(CLAIM_QUERY, claim_hint, seeded.fixtures)
        claim: list[Measurement] = []
        for config in CLAIM_CONFIGS:
            say(f"claim: {config.label}")
            claim.append(measure_claim(conn, config, claim_params, runs))

        queries: list[Measurement] = []
        for query, hint in hinted:
            if query.name == CLAIM_QUERY:
                continue  # measured above, configuration by configuration
            say(f"query: {query.name}")
            queries.append(measure_query(conn, query, hint, seeded.fixtures, runs))
        skipped = tuple(sorted(n for n in QUERIES if n not in {q.name for q, _ in hinted}))
        machine = machine_info(conn)
    return ExplainReport(
        rows=rows,
        claimable=seeded.claimable,
        claimable_in_queue=seeded.claimable_in_queue,
        limit=int(claim_params.get("n", 0)),
        runs=runs,
        claim=tuple(claim),
        queries=tuple(queries),
        machine=machine,
        generated_at=datetime.now(UTC),
        skipped=skipped,
    )


def run_explain(
    admin_url: str,
    *,
    rows: int = DEFAULT_ROWS,
    runs: int = DEFAULT_RUNS,
    progress: Progress | None = None,
) -> ExplainReport:
    """Measure on a throwaway clone of the migrated template on `admin_url`'s server; drop it."""
    say = progress or (lambda _message: None)
    template = testing.ensure_template(admin_url)
    url = testing.create_clone(admin_url, template, prefix=EXPLAIN_PREFIX)
    say(f"throwaway database {database_name(url)}")
    try:
        return run_on(url, rows=rows, runs=runs, progress=progress)
    finally:
        testing.drop_database(admin_url, url)
        say(f"dropped {database_name(url)}")


# ----------------------------------------------------------------------------- report


def _ms(value: float) -> str:
    return f"{value:.3f}"


def _ratio(value: float, base: float) -> str:
    if base <= 0:
        return "—"
    return f"{value / base:.1f}×"


def _path(stats: PlanStats) -> str:
    return " → ".join(stats.node_path)


def render_markdown(report: ExplainReport) -> str:
    """docs/EXPLAIN.md: machine, claim configurations with ratios, hinted queries."""
    m = report.machine
    base = report.claim_config("full").ok
    lines = [
        "# EXPLAIN — the claim and the named queries",
        "",
        f"Generated by `jobyard db explain` (`make explain`) on "
        f"{report.generated_at:%Y-%m-%d %H:%M} UTC. Do not edit by hand: re-run it. "
        "How the harness works and how a query opts in: docs/DATABASE.md.",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m.cpu} ({m.cores} cores) |",
        f"| memory | {m.memory} |",
        f"| OS | {m.os} |",
        f"| Python | {m.python} |",
        f"| PostgreSQL | {m.server} |",
        f"| settings | {', '.join(f'{k}={v}' for k, v in m.settings.items())} |",
        "",
        "The machine is shared and noisy: read the ratios and the plan shapes, not the third "
        "decimal.",
        "",
        f"## The claim (`{CLAIM_QUERY}`)",
        "",
        f"`jobs` holds {report.rows:,} rows, {report.claimable:,} of them claimable "
        f"(`status = 'queued'`), spread over {QUEUE_COUNT} queues; the claim asks for "
        f"LIMIT {report.limit} from a queue holding {report.claimable_in_queue:,}. Each time is "
        f"the median of {report.runs} runs of `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)` of the "
        "real named query after one warm-up, each inside a transaction that is rolled back; the "
        "index configuration is applied inside that transaction too.",
        "",
        "- **select**: the picking SELECT alone (the `picked` CTE: find, order, lock, limit).",
        "- **statement**: planning + execution of the whole claim (pick, then update the jobs).",
        "- **rows read**: tuples the picking SELECT's table scans touched (returned + filtered).",
        "- **buffers**: shared blocks the picking SELECT hit in cache / read from disk.",
        "",
        "| configuration | select ms | select × | statement ms | statement × | rows read "
        "| buffers hit/read | Sort | picking path |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    base_statement = base.planning_ms + base.execution_ms
    for meas in report.claim:
        if meas.stats is None:
            lines.append(f"| {meas.label} | error: {meas.error} | | | | | | | |")
            continue
        s = meas.stats
        statement = s.planning_ms + s.execution_ms
        lines.append(
            f"| {meas.label} | {_ms(s.subtree_ms)} | {_ratio(s.subtree_ms, base.subtree_ms)} "
            f"| {_ms(statement)} | {_ratio(statement, base_statement)} | {s.rows_read:,} "
            f"| {s.shared_hit:,}/{s.shared_read:,} | {'yes' if s.has_sort else 'no'} "
            f"| {_path(s)} |"
        )
    lines += ["", *_claim_commentary(report), ""]
    lines += [
        "## Hinted named queries",
        "",
        "Every named query with a `-- explain: {json}` line, on the same data with the full "
        "indexes, planning and execution times as medians. A query whose hint fails to run is "
        "listed with its error.",
        "",
    ]
    if not report.queries:
        lines.append("No other named query carries an `-- explain:` hint yet.")
    else:
        lines += [
            "| query | file | plan ms | exec ms | rows read | buffers hit/read | Sort "
            "| indexes | path |",
            "|---|---|---:|---:|---:|---:|---|---|---|",
        ]
        for meas in report.queries:
            if meas.stats is None:
                lines.append(f"| `{meas.key}` | {meas.label} | error: {meas.error} | | | | | | |")
                continue
            s = meas.stats
            lines.append(
                f"| `{meas.key}` | {meas.label} | {_ms(s.planning_ms)} | {_ms(s.execution_ms)} "
                f"| {s.rows_read:,} | {s.shared_hit:,}/{s.shared_read:,} "
                f"| {'yes' if s.has_sort else 'no'} | {', '.join(s.indexes) or '—'} | {_path(s)} |"
            )
    if report.skipped:
        lines += [
            "",
            f"Named queries without a hint (not measured): "
            f"{', '.join(f'`{n}`' for n in report.skipped)}.",
        ]
    return "\n".join(lines) + "\n"


def _claim_commentary(report: ExplainReport) -> list[str]:
    """Sentences computed from this run, so the prose cannot drift from the numbers."""
    base = report.claim_config("full").ok
    out = [
        f"With the full claim index the picking SELECT reads {base.rows_read:,} rows for "
        f"LIMIT {report.limit} and has {'a' if base.has_sort else 'no'} Sort node: "
        f"{_path(base)}."
    ]
    for meas in report.claim:
        if meas.key == "full" or meas.stats is None:
            continue
        s = meas.stats
        out.append(
            f"{meas.label}: {_ratio(s.subtree_ms, base.subtree_ms)} the select time, "
            f"{s.rows_read:,} rows read, {'with' if s.has_sort else 'without'} a Sort."
        )
    return [f"- {line}" for line in out]


def summary_lines(report: ExplainReport) -> list[str]:
    """A few lines for the terminal: the claim table in short, and any failing hinted query."""
    base = report.claim_config("full").ok
    lines = []
    for meas in report.claim:
        s = meas.ok
        lines.append(
            f"{meas.label}: select {_ms(s.subtree_ms)} ms "
            f"({_ratio(s.subtree_ms, base.subtree_ms)}), {s.rows_read:,} rows read, "
            f"{'Sort' if s.has_sort else 'no Sort'}"
        )
    for meas in report.queries:
        if meas.error is not None:
            lines.append(f"{meas.key}: {meas.error}")
    lines.append(
        f"{len(report.queries)} hinted queries measured, {len(report.skipped)} without a hint"
    )
    return lines


def write_report(report: ExplainReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(report), encoding="utf-8")
