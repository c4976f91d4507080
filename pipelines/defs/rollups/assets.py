"""Roll-ups over all runs and the fleet report drawn from them, rebuilt on a schedule."""

import dagster as dg

from pipelines.defs.resources import WarehouseResource
from pipelines.warehouse import rollups, sql
from pipelines.warehouse.store import ROLLUP_TABLES

# Which roll-ups each roll-up reads, from its SQL.
_DEPS = rollups.lineage()


@dg.multi_asset(
    specs=[
        dg.AssetSpec(name, group_name="rollups", kinds={"parquet", "duckdb"}, description=sql.table(name).summary, deps=_DEPS[name])
        for name in ROLLUP_TABLES
    ],
    can_subset=False,
)
def cross_run_tables(warehouse: WarehouseResource):
    """The run summary, scaling across runs of each job, every run's verdict and its regressions."""
    counts = rollups.publish(warehouse.open(), warehouse.settings())
    for name in ROLLUP_TABLES:
        yield dg.MaterializeResult(asset_key=name, metadata={"dagster/row_count": counts[name]})


@dg.asset(group_name="rollups", kinds={"html"}, deps=list(ROLLUP_TABLES))
def fleet_report(warehouse: WarehouseResource) -> dg.MaterializeResult:
    """Every job's runs over time, with their regressions and scaling: one standalone HTML file."""
    from pipelines.report.fleet import report_fleet

    path = report_fleet(warehouse.open(), warehouse.settings())
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(str(path)), "url": dg.MetadataValue.url(path.as_uri())})
