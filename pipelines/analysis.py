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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipelines import replay, sql, whatif
from pipelines.cache import kept
from pipelines.settings import Settings
from pipelines.warehouse import ANALYSIS_TABLES, PARSE_TABLES, Warehouse, create_version_view, open_version

# Build order: each file may read the tables before it. Names starting with `_` are
# intermediate and not published. `_bucket_readiness` comes early so that `_device_events`, its
# last reader, leaves memory before the sweep (`step_timeline`).
BUILD_ORDER = (
    "_device_events",
    "_activity",
    "_step_spans",
    "_backward_starts",
    "steps",
    "collectives",
    "_bucket_readiness",
    "step_timeline",
    "step_breakdown",
    "step_comm_groups",
    "rank_breakdown",
    "collective_sync",
    "_fr_groups",
    "collective_bw",
    "step_sync",
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
# The what-if tables need their grid, which depends on the run (its N and its line rate); the
# replay's tables are registered then too, from what the replay's own queries read.
WHATIF_START = "_whatif_costs"
REPLAY_TABLES = ("_whatif_replay", "_whatif_replay_dimensions", "_whatif_replay_targets")


@dataclass
class AnalysisSummary:
    run_id: str
    rows: dict[str, int]
    seconds: float
    table_seconds: dict[str, float]  # building each table (intermediates too) and writing it, in build order
    finished: Any = None  # what `finish` returned


# The run's N and line rate, read before the what-if tables are built (see _register_whatif_inputs).
WHATIF_INPUTS_QUERY = """
SELECT
  (SELECT max(ranks) FROM _whatif_scenario),
  CASE WHEN (SELECT bool_and(scope = 'intra') FROM collective_bw) AND (SELECT any_value(intra_link_gbps) FROM runs) > 0
       THEN (SELECT any_value(intra_link_gbps) FROM runs)
       ELSE (SELECT any_value(link_gbps) FROM runs) END
"""


def _register_whatif_inputs(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """The run's what-if grid: its own N and multiples, the default line rates plus its own; and
    the replay over that grid.

    The run's own line rate is that of the link its collectives use: the intra-node rate when all
    of them stay within one host and that rate is known, else the NIC's.
    """
    ranks, link = con.execute(WHATIF_INPUTS_QUERY).fetchall()[0]
    ranks = ranks or 1
    bandwidths = tuple(sorted(set(whatif.DEFAULT_BANDWIDTHS_GBPS) | ({link} if link else set())))
    grid = whatif.Grid(tuple(ranks * m for m in whatif.DEFAULT_RANK_MULTIPLES), bandwidths, whatif.DEFAULT_COMPRESSIONS)
    whatif.register_inputs(con, grid, settings.reduce_cost)
    sql.set_variables(con, fusion="observed", run_link_gbps=link)
    replay.register(con, whatif.DEFAULT_RANK_MULTIPLES, bandwidths, whatif.DEFAULT_COMPRESSIONS, whatif.DEFAULT_TARGETS)


def _reads(order: tuple[str, ...] = BUILD_ORDER) -> dict[str, set[str]]:
    """For each table of `order`, the tables (parse tables, and tables before it) its SQL reads.

    DuckDB's own parser says which relations a query names, so neither comments nor columns that
    share a table's name count; the what-if costs also read the query run just before them, and a
    table built on the replay's registered tables reads what the replay's queries read. Parsing
    takes a fifth of a second, so the answer is kept, under a digest of every query it read.
    """
    queries = {name: sql.table(name).query for name in order}
    digest = hashlib.sha256(
        json.dumps([duckdb.__version__, PARSE_TABLES, queries, replay.QUERIES, WHATIF_INPUTS_QUERY]).encode()
    ).hexdigest()[:20]
    reads = json.loads(kept(f"reads-{digest}.json", lambda: json.dumps(_parsed_reads(order, queries))))
    return {name: set(tables) for name, tables in reads.items()}


def _parsed_reads(order: tuple[str, ...], queries: dict[str, str]) -> dict[str, list[str]]:
    con = sql.session()
    reads = {}
    try:
        replayed = set().union(*(sql.relations(con, query) for query in replay.QUERIES))
        for position, name in enumerate(order):
            named = sql.relations(con, queries[name]) | (sql.relations(con, WHATIF_INPUTS_QUERY) if name == WHATIF_START else set())
            if named & set(REPLAY_TABLES):
                named |= replayed
            reads[name] = sorted(named & set(PARSE_TABLES + order[:position]))
    finally:
        con.close()
    return reads


def last_readers(order: tuple[str, ...] = BUILD_ORDER) -> dict[str, str]:
    """For each intermediate table of `order`, the last table after it whose SQL reads it.

    An intermediate that no later query names can leave memory once it is built, and on a large
    run the session's tables are what would otherwise spill to disk.
    """
    reads = _reads(order)
    last = {}
    for position, name in enumerate(order):
        if name in ANALYSIS_TABLES:
            continue
        readers = [later for later in order[position + 1 :] if name in reads[later]]
        last[name] = readers[-1] if readers else name
    return last


def lineage(order: tuple[str, ...] = BUILD_ORDER) -> dict[str, list[str]]:
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
        for name in order
        if name in ANALYSIS_TABLES
    }


def _publish(con: duckdb.DuckDBPyConnection, name: str, folder: Path) -> int:
    """Write a published table straight to its Parquet file; later queries read it back from there.

    The file is needed anyway, and reading it back costs little, while holding a table of tens of
    millions of rows (`step_timeline`) in the session would push the rest of the analysis to disk.
    """
    written = sql.write_parquet(con, f"({sql.table(name).select()})", folder / "part-0.parquet")
    create_version_view(con, name)
    return written


def analyze_run(
    run_id: str, version: Path, warehouse: Warehouse, settings: Settings,
    finish: Callable[[duckdb.DuckDBPyConnection], Any] | None = None,
) -> AnalysisSummary:
    """Build every analysis table of the run from its parse tables, into `version`.

    `finish` runs in the session once every table is built, where each table is a view of its
    file: checks read the run there without opening a session of their own.
    """
    started = time.perf_counter()
    con = open_version(version, settings, run_id)
    rows: dict[str, int] = {}
    seconds: dict[str, float] = {}
    done_after: dict[str, list[str]] = {}
    for name, reader in last_readers().items():
        done_after.setdefault(reader, []).append(name)
    try:
        for name in BUILD_ORDER:
            table_started = time.perf_counter()
            if name == WHATIF_START:
                _register_whatif_inputs(con, settings)
            if name in ANALYSIS_TABLES:
                rows[name] = _publish(con, name, warehouse.table_dir(version, name))
            else:
                rows[name] = sql.materialize(con, name)
            for finished in done_after.get(name, []):
                con.execute(f'DROP TABLE "{finished}"').fetchall()
            seconds[name] = time.perf_counter() - table_started
        finished = finish(con) if finish else None
    finally:
        con.close()
    published = {name: rows[name] for name in ANALYSIS_TABLES}
    return AnalysisSummary(run_id, published, time.perf_counter() - started, seconds, finished)
