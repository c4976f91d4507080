"""Roll-ups over all runs, rebuilt on a schedule."""

import dagster as dg

from pipelines.defs.resources import WarehouseResource


@dg.asset(group_name="rollups", kinds={"parquet", "duckdb"})
def run_summary(warehouse: WarehouseResource) -> dg.MaterializeResult:
    """One line per run (exposed communication share, overlap, steps, collectives) to compare runs."""
    store = warehouse.open()
    con = store.connect()
    try:
        rows = store.replace_rollup("run_summary", con)
    finally:
        con.close()
    return dg.MaterializeResult(metadata={"dagster/row_count": rows})
