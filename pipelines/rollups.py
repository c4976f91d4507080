"""Tables over all runs: the run summary, scaling across runs of a job, and each run's verdict.

They are rebuilt on a schedule into the warehouse, and recomputed live (same SQL) wherever the
freshest answer matters: a report, the CLI after an ingest.
"""

from __future__ import annotations

import duckdb

from pipelines import sql
from pipelines.kineto.normalize import MAX_PLAUSIBLE_DUR_NS
from pipelines.settings import Settings
from pipelines.warehouse import ROLLUP_TABLES, Warehouse


def session(store: Warehouse, settings: Settings) -> duckdb.DuckDBPyConnection:
    """A session over every published run, with the macros and thresholds the roll-ups use."""
    con = store.connect(settings.threads)
    sql.set_variables(con, comm_pattern=settings.comm_regex(), max_dur_ns=MAX_PLAUSIBLE_DUR_NS, **settings.verdict)
    sql.run_macros(con)
    return con


def recompute(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rebuild every roll-up in this session (as temporary tables that shadow the stored ones)."""
    return {name: sql.materialize(con, name) for name in ROLLUP_TABLES}


def publish(store: Warehouse, settings: Settings) -> dict[str, int]:
    """Recompute the roll-ups and replace their stored files."""
    con = session(store, settings)
    try:
        recompute(con)
        return {name: store.replace_rollup(name, con) for name in ROLLUP_TABLES}
    finally:
        con.close()
