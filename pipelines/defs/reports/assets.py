"""The per-run HTML report, rewritten whenever the run's analysis changes."""

import dagster as dg

from pipelines import stages
from pipelines.defs.partitions import runs_partitions
from pipelines.defs.resources import WarehouseResource
from pipelines.warehouse import ANALYSIS_TABLES


@dg.asset(
    partitions_def=runs_partitions,
    group_name="reports",
    kinds={"html"},
    deps=list(ANALYSIS_TABLES),
)
def run_report(context: dg.AssetExecutionContext, warehouse: WarehouseResource) -> dg.MaterializeResult:
    """A standalone HTML report of the run (charts inlined, works offline)."""
    path = stages.report(warehouse.open(), warehouse.settings(), context.partition_key)
    return dg.MaterializeResult(
        metadata={"path": dg.MetadataValue.path(str(path)), "url": dg.MetadataValue.url(path.as_uri())}
    )
