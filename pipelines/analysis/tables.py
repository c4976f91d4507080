"""The analysis stage of a run: its parse tables in, its analysis tables out.

Everything here is SQL from `sql/`, run in a private in-memory DuckDB session over the Parquet
files of one staging version. Re-running it never re-reads a raw trace. Published tables go
straight to their Parquet files and are read back from there; intermediates live in the session
until the last query that reads them, so that a large run's analysis stays within its memory.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipelines.analysis import critical_path, gloo_groups, replay, sweep, whatif
from pipelines.analysis.rank_ranges import rank_ranges
from pipelines.settings import Settings
from pipelines.warehouse import sql
from pipelines.warehouse.cache import kept
from pipelines.warehouse.store import ANALYSIS_TABLES, PARSE_TABLES, Warehouse, create_version_view, version_variables

# Build order: each file may read the tables before it. Names starting with `_` are
# intermediate and not published. Tables whose inputs are built are built at once, first those
# that lead to the most Python steps, then the longest chain still to come, ties in this order.
BUILD_ORDER = (
    "_device_events",
    "_activity",
    "_step_spans",
    "stream_idle",
    "_backward_starts",
    "steps",
    "collectives",
    "_bucket_readiness",
    "step_timeline",
    "step_breakdown",
    "step_comm_groups",
    "rank_breakdown",
    "collective_sync",
    "step_critical_path",
    "step_dependencies",
    "_fr_groups",
    "collective_bw",
    "step_sync",
    "_host_traffic",
    "net_utilization",
    "network_summary",
    "gradient_buckets",
    "whatif_inputs",
    "_whatif_scenario",
    "_whatif_costs",
    "_whatif_paper",
    "_whatif_paper_targets",
    "whatif",
    "whatif_targets",
    "whatif_dimensions",
    "nccl_crosscheck",
    "fr_mismatches",
)


@dataclass
class AnalysisSummary:
    run_id: str
    rows: dict[str, int]
    seconds: float
    table_seconds: dict[str, float]  # building each table (intermediates and the what-if step too) and writing it
    finished: Any = None  # what `finish` returned


# The run's N and line rate, read before the what-if tables are built (see _register_whatif).
WHATIF_INPUTS_QUERY = """
SELECT
  (SELECT max(ranks) FROM _whatif_scenario),
  CASE WHEN (SELECT bool_and(scope = 'intra') FROM collective_bw) AND (SELECT any_value(intra_link_gbps) FROM runs) > 0
       THEN (SELECT any_value(intra_link_gbps) FROM runs)
       ELSE (SELECT any_value(link_gbps) FROM runs) END
"""


def _register_whatif(con: duckdb.DuckDBPyConnection, settings: Settings) -> dict[str, Any]:
    """The run's what-if grid: its own N and multiples, the default line rates plus its own; and
    the replay over that grid. Returns the variables the what-if SQL reads.

    The run's own line rate is that of the link its collectives use: the intra-node rate when all
    of them stay within one host and that rate is known, else the NIC's.
    """
    ranks, link = con.execute(WHATIF_INPUTS_QUERY).fetchall()[0]
    ranks = ranks or 1
    bandwidths = tuple(sorted(set(whatif.DEFAULT_BANDWIDTHS_GBPS) | ({link} if link else set())))
    grid = whatif.Grid(tuple(ranks * m for m in whatif.DEFAULT_RANK_MULTIPLES), bandwidths, whatif.DEFAULT_COMPRESSIONS)
    whatif.register_inputs(con, grid, settings.reduce_cost, temporary=False)
    replay.register(con, whatif.DEFAULT_RANK_MULTIPLES, bandwidths, whatif.DEFAULT_COMPRESSIONS, whatif.DEFAULT_TARGETS)
    return {"fusion": "observed", "run_link_gbps": link}


def _register_gloo_groups(con: duckdb.DuckDBPyConnection, settings: Settings) -> dict[str, Any]:
    gloo_groups.register(con)
    return {}


def _register_critical_path(con: duckdb.DuckDBPyConnection, settings: Settings) -> dict[str, Any]:
    critical_path.register(con)
    return {}


@dataclass(frozen=True)
class PythonStep:
    """A step built in Python, not SQL: it runs `build` just before the table `before`, reads what
    its `queries` read, and creates `tables`; `build` returns session variables to set."""

    before: str
    queries: tuple[str, ...]
    tables: tuple[str, ...]
    build: Callable[[duckdb.DuckDBPyConnection, Settings], dict[str, Any]]


PYTHON_STEPS = {
    # Which group each gloo collective ran in (pipelines/analysis/gloo_groups.py), for `collectives`.
    gloo_groups.STEP: PythonStep("collectives", gloo_groups.QUERIES, (gloo_groups.TABLE,), _register_gloo_groups),
    # Every step's critical path and graph (pipelines/analysis/critical_path.py), for `step_critical_path`
    # and `step_dependencies`.
    critical_path.STEP: PythonStep(
        "step_critical_path", critical_path.QUERIES, (critical_path.TABLE, critical_path.GRAPH_TABLE),
        _register_critical_path),
    # The run's what-if grid (its N and its line rate) and the replay over it, as the tables the
    # what-if SQL reads.
    "_whatif_grid_and_replay": PythonStep(
        "_whatif_costs", (*replay.QUERIES, WHATIF_INPUTS_QUERY), whatif.INPUT_TABLES + replay.TABLES, _register_whatif),
}


@dataclass(frozen=True)
class PythonStream:
    """Rows a published table's SQL reads as relation `name`, computed in Python by `make` on the
    connection that builds the table, just before it: they stream from Python into the table's
    file without ever being held whole. `queries` are what `make` reads."""

    name: str
    queries: tuple[str, ...]
    make: Callable[[duckdb.DuckDBPyConnection], Any]


PYTHON_STREAMS = {
    # Each rank's timeline cut into stretches of one state (pipelines/analysis/sweep.py).
    "step_timeline": PythonStream(sweep.STREAM, sweep.QUERIES, sweep.stretches),
}


def steps() -> tuple[str, ...]:
    """Every table of BUILD_ORDER, and each Python step just before the table it precedes."""
    order: list[str] = []
    for name in BUILD_ORDER:
        order += [step for step, python in PYTHON_STEPS.items() if python.before == name] + [name]
    return tuple(order)


def _reads(order: tuple[str, ...] | None = None) -> dict[str, set[str]]:
    """For each step of `order`, the tables (parse tables, and steps before it) its SQL reads.

    DuckDB's own parser says which relations a query names, so neither comments nor columns that
    share a table's name count; a table that names one of the what-if step's tables reads that
    step, which reads what its queries read. Parsing takes a fifth of a second, so the answer is
    kept, under a digest of every query it read.
    """
    order = order or steps()
    queries = {name: sql.table(name).query for name in order if name not in PYTHON_STEPS}
    python = {name: [step.queries, step.tables] for name, step in PYTHON_STEPS.items()}
    streams = {name: stream.queries for name, stream in PYTHON_STREAMS.items()}
    digest = hashlib.sha256(
        json.dumps([duckdb.__version__, PARSE_TABLES, order, queries, python, streams]).encode()
    ).hexdigest()[:20]
    reads = json.loads(kept(f"reads-{digest}.json", lambda: json.dumps(_parsed_reads(order, queries))))
    return {name: set(tables) for name, tables in reads.items()}


def _parsed_reads(order: tuple[str, ...], queries: dict[str, str]) -> dict[str, list[str]]:
    con = sql.session()
    reads = {}
    try:
        for position, name in enumerate(order):
            if name in PYTHON_STEPS:
                named = set().union(*(sql.relations(con, query) for query in PYTHON_STEPS[name].queries))
            else:
                named = sql.relations(con, queries[name])
            if name in PYTHON_STREAMS:
                named |= set().union(*(sql.relations(con, query) for query in PYTHON_STREAMS[name].queries))
            named |= {step for step, python in PYTHON_STEPS.items() if named & set(python.tables)}
            reads[name] = sorted(named & set(PARSE_TABLES + order[:position]))
    finally:
        con.close()
    return reads


def lineage(order: tuple[str, ...] | None = None) -> dict[str, list[str]]:
    """For each published table of `order`, the published tables it is derived from.

    The assets' dependencies, from the SQL: an intermediate a table reads stands for what that
    intermediate reads, and so on down to published tables.
    """
    reads = _reads(order)

    def published(name: str) -> set[str]:
        if name in PARSE_TABLES or name in ANALYSIS_TABLES:
            return {name}
        return set().union(*(published(other) for other in reads[name]))

    return {
        name: sorted(set().union(*(published(other) for other in reads[name])))
        for name in reads
        if name in ANALYSIS_TABLES
    }


def _publish(con: duckdb.DuckDBPyConnection, name: str, folder: Path) -> int:
    """Write a published table straight to its Parquet file; later queries read it back from there.

    The file is needed anyway, and reading it back costs little, while holding a table of tens of
    millions of rows (`step_timeline`) in the session would push the rest of the analysis to disk.
    """
    if sql.lacks_inputs(con, name):
        written = 0
        sql.write_empty(name, folder / "part-0.parquet")
    else:
        written = sql.write_parquet(con, f"({sql.table(name).select()})", folder / "part-0.parquet")
    create_version_view(con, name, temporary=False)
    return written


# Intermediates whose rows each come from one rank's events, built a piece of the run's ranks at a
# time where its ranks hold more than PIECE_DEVICE_EVENTS device events (`ranks.device_events`),
# in pieces of about that many: one piece's joins fit in memory where the whole run's spill to
# disk (ten million device events: `_device_events` in 6.5-7.4 s a quarter at a time, against
# 8.1-9.1 s whole, alone on two cores, three pairs in turn). Their SQL keeps a piece's ranks through the macro `in_piece`.
BY_RANKS = frozenset({"_device_events"})
PIECE_DEVICE_EVENTS = 2_500_000
RANK_DEVICE_EVENTS_QUERY = "SELECT rank, sum(coalesce(device_events, 0)) FROM ranks GROUP BY rank ORDER BY rank"


def pieces_of_ranks(device_events: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """Ranges of ranks (first, last) of about `size` device events each, from each rank's count
    (in rank order): together they cover every rank there could be, the first from the least
    INTEGER and the last to the greatest; none where the run has `size` or fewer."""
    if sum(events for _, events in device_events) <= size:
        return []
    lasts = [last for _, last in rank_ranges(device_events, size)]
    return list(zip([-2**31] + [last + 1 for last in lasts[:-1]], lasts[:-1] + [2**31 - 1]))


# SQL tables are built two at a time (one per thread) on runs up to this many trace events. Beyond,
# each statement's scans keep every thread busy, and two at once split DuckDB's memory limit and
# spill: ten million device events took 124 s at 1.55 GB of memory two at a time. A Python step
# runs beside them either way (see `_build_all`).
PARALLEL_BUILD_MAX_EVENTS = 5_000_000
# A Python step's arrays lie outside DuckDB's memory limit. While one runs, DuckDB keeps this share
# of `[resources] memory_mb` free for them, so that the two together stay within the limit: beside
# the replay or the sweep, ten million device events peaked at 1.04-1.06 GB with DuckDB at its whole
# limit, and at 0.86-0.88 GB with this share lent (docs/performance.md).
PYTHON_STEP_SHARE = 0.3


@contextmanager
def _lent_to_python(con: duckdb.DuckDBPyConnection, settings: Settings) -> Iterator[None]:
    """DuckDB's memory limit lowered by PYTHON_STEP_SHARE meanwhile, and set back after. Where
    DuckDB cannot free that much at once, the limit stays: the step then runs as it would have."""
    try:
        con.execute("SET memory_limit = $limit", {"limit": f"{round(settings.memory_mb * (1 - PYTHON_STEP_SHARE))}MB"}).fetchall()
    except duckdb.OutOfMemoryException:
        yield
        return
    try:
        yield
    finally:
        con.execute("SET memory_limit = $limit", {"limit": f"{settings.memory_mb}MB"}).fetchall()


def analyze_run(
    run_id: str, version: Path, warehouse: Warehouse, settings: Settings,
    finish: Callable[[duckdb.DuckDBPyConnection], Any] | None = None,
) -> AnalysisSummary:
    """Build every analysis table of the run from its parse tables, into `version`.

    Each of `[resources] threads` threads builds a table whose inputs are built, on a connection
    of its own to one shared session: most of a small table's time is DuckDB planning it on one
    core, and the replay is Python, so building two at once uses a second core that one
    statement at a time leaves idle; a large run's SQL tables are built one at a time, with one
    Python step beside them. `finish` runs in the session once every table is built, where each
    table is a view of its file: checks read the run there without opening a session of their own.
    """
    started = time.perf_counter()
    shared = sql.SharedSession(settings.duckdb_config())
    try:
        con = shared.connect()
        shared.set_variables(**version_variables(version, settings, run_id), **sql.macro_variables())
        shared.sync(con)
        for name in PARSE_TABLES:
            create_version_view(con, name, temporary=False)

        def build(con: duckdb.DuckDBPyConnection, name: str) -> int | None:
            if name in PYTHON_STEPS:
                with _lent_to_python(con, settings):
                    shared.set_variables(**PYTHON_STEPS[name].build(con, settings))
                return None
            if name in PYTHON_STREAMS:
                stream = PYTHON_STREAMS[name]
                con.register(stream.name, stream.make(con))
                try:
                    with _lent_to_python(con, settings):
                        return _publish(con, name, warehouse.table_dir(version, name))
                finally:
                    con.unregister(stream.name)
            if name in ANALYSIS_TABLES:
                return _publish(con, name, warehouse.table_dir(version, name))
            return sql.materialize(con, name, temporary=False, pieces=pieces if name in BY_RANKS else ())

        pieces = pieces_of_ranks(con.execute(RANK_DEVICE_EVENTS_QUERY).fetchall(), PIECE_DEVICE_EVENTS)
        (events,) = con.execute("SELECT count(*) FROM trace_events").fetchone()
        workers = settings.threads if events <= PARALLEL_BUILD_MAX_EVENTS else 1
        rows, seconds = _build_all(shared, con, build, workers)
        shared.sync(con)
        finished = finish(con) if finish else None
    finally:
        shared.close()
    published = {name: rows[name] for name in ANALYSIS_TABLES}
    return AnalysisSummary(run_id, published, time.perf_counter() - started, seconds, finished)


def _build_all(
    shared: sql.SharedSession, con: duckdb.DuckDBPyConnection, build: Callable[[duckdb.DuckDBPyConnection, str], int | None],
    workers: int,
) -> tuple[dict[str, int | None], dict[str, float]]:
    """Build every step, `workers` SQL statements at a time and beside them one step whose work is
    Python's (the critical path, the replay, the sweep of a streamed table: one core, while
    DuckDB's statement uses the others), each once the steps it reads are built; drop each
    intermediate (on `con`) once every step that reads it is built. Returns each step's rows and
    seconds."""
    order = steps()
    reads = _reads(order)
    readers = {name: {later for later in order if name in reads[later]} for name in order}
    # Ahead of the longest chain of steps from each to the last, the most Python steps on one:
    # they run one at a time, so a step that leads to them goes first and keeps their core busy.
    chain: dict[str, tuple[int, int]] = {}
    for name in reversed(order):
        python_steps, steps_after = max((chain[reader] for reader in readers[name]), default=(0, 0))
        chain[name] = (python_steps + (name in PYTHON_STEPS or name in PYTHON_STREAMS), steps_after + 1)
    def run(name: str) -> tuple[int | None, float]:
        con = shared.here()
        begun = time.perf_counter()
        return build(con, name), time.perf_counter() - begun

    rows: dict[str, int | None] = {}
    seconds: dict[str, float] = {}
    running: dict[Future, str] = {}
    built = set(PARSE_TABLES)

    def python(name: str) -> bool:
        return name in PYTHON_STEPS or name in PYTHON_STREAMS

    def free(name: str) -> bool:  # a slot of its kind is free
        kind = python(name)
        return sum(python(other) == kind for other in running.values()) < (1 if kind else max(1, workers))

    with ThreadPoolExecutor(max(1, workers) + 1, thread_name_prefix="wirespeed-analysis") as pool:
        while len(rows) < len(order):
            ready = [name for name in order if name not in built and name not in running.values() and reads[name] <= built]
            for name in sorted(ready, key=lambda n: chain[n], reverse=True):
                if free(name):
                    running[pool.submit(run, name)] = name
            if not running:
                raise RuntimeError(f"nothing can build {sorted(set(order) - built)}: each reads a step that does not come before it")
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                name = running.pop(future)
                rows[name], seconds[name] = future.result()
                built.add(name)
                for done in {name} | reads[name]:  # an intermediate no step still to come reads
                    if done in readers and done not in ANALYSIS_TABLES and readers[done] <= built:
                        for table in PYTHON_STEPS[done].tables if done in PYTHON_STEPS else (done,):
                            con.execute(f'DROP TABLE "{table}"').fetchall()
    return rows, seconds
