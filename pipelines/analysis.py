"""The analysis stage of a run: its parse tables in, its analysis tables out.

Everything here is SQL from `sql/`, run in a private in-memory DuckDB session over the Parquet
files of one staging version. Re-running it never re-reads a raw trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipelines import sql, whatif
from pipelines.kineto.normalize import MAX_PLAUSIBLE_DUR_NS
from pipelines.settings import Settings
from pipelines.warehouse import ANALYSIS_TABLES, PARSE_TABLES, Warehouse

# Build order: each file may read the tables before it. Names starting with `_` are
# intermediate and not published.
BUILD_ORDER = (
    "_device_events",
    "_activity",
    "steps",
    "_segments",
    "collectives",
    "step_timeline",
    "step_breakdown",
    "rank_breakdown",
    "collective_sync",
    "collective_bw",
    "step_sync",
    "net_utilization",
    "network_summary",
    "gradient_buckets",
    "_whatif_scenario",
    "_whatif_costs",
    "whatif",
    "whatif_targets",
    "nccl_crosscheck",
)
# The what-if tables need their grid, which depends on the run (its N and its line rate).
WHATIF_START = "_whatif_costs"


@dataclass
class AnalysisSummary:
    run_id: str
    rows: dict[str, int]
    seconds: float
    table_seconds: dict[str, float]  # building each table (intermediates too) and writing it, in build order


def open_version(
    version: Path, settings: Settings, run_id: str, tables: tuple[str, ...] = PARSE_TABLES
) -> duckdb.DuckDBPyConnection:
    """A session with a view per table in `tables`, reading one version of one run."""
    con = duckdb.connect(config=settings.duckdb_config())
    sql.set_variables(
        con,
        run_id=run_id,
        version_dir=str(version),
        comm_pattern=settings.comm_regex(),
        max_dur_ns=MAX_PLAUSIBLE_DUR_NS,
    )
    for name in tables:
        con.execute(
            f'CREATE OR REPLACE VIEW "{name}" AS SELECT * FROM read_parquet('
            f"getvariable('version_dir') || '/{name}/*.parquet', union_by_name = true)"
        ).fetchall()
    sql.run_macros(con)
    return con


def _register_whatif_inputs(con: duckdb.DuckDBPyConnection, settings: Settings) -> None:
    """The run's what-if grid: its own N and multiples, the default line rates plus its own.

    The run's own line rate is that of the link its collectives use: the intra-node rate when all
    of them stay within one host and that rate is known, else the NIC's.
    """
    ranks, link = con.execute(
        """
        SELECT
          (SELECT max(ranks) FROM _whatif_scenario),
          CASE WHEN (SELECT bool_and(scope = 'intra') FROM collective_bw) AND (SELECT any_value(intra_link_gbps) FROM runs) > 0
               THEN (SELECT any_value(intra_link_gbps) FROM runs)
               ELSE (SELECT any_value(link_gbps) FROM runs) END
        """
    ).fetchall()[0]
    ranks = ranks or 1
    bandwidths = tuple(sorted(set(whatif.DEFAULT_BANDWIDTHS_GBPS) | ({link} if link else set())))
    grid = whatif.Grid(tuple(ranks * m for m in whatif.DEFAULT_RANK_MULTIPLES), bandwidths, whatif.DEFAULT_COMPRESSIONS)
    whatif.register_inputs(con, grid, settings.reduce_cost)
    sql.set_variables(con, fusion="observed", run_link_gbps=link)


def analyze_run(run_id: str, version: Path, warehouse: Warehouse, settings: Settings) -> AnalysisSummary:
    """Build every analysis table of the run from its parse tables, into `version`."""
    started = time.perf_counter()
    con = open_version(version, settings, run_id)
    rows: dict[str, int] = {}
    seconds: dict[str, float] = {}
    try:
        for name in BUILD_ORDER:
            table_started = time.perf_counter()
            if name == WHATIF_START:
                _register_whatif_inputs(con, settings)
            rows[name] = sql.materialize(con, name)
            if name in ANALYSIS_TABLES:
                sql.write_parquet(con, f'"{name}"', warehouse.table_dir(version, name) / "part-0.parquet")
            seconds[name] = time.perf_counter() - table_started
    finally:
        con.close()
    published = {name: rows[name] for name in ANALYSIS_TABLES}
    return AnalysisSummary(run_id, published, time.perf_counter() - started, seconds)
