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
    """A standalone HTML report of the run (charts inlined, works offline), with its verdict, so
    that the asset catalog answers the question without opening the file."""
    store, settings = warehouse.open(), warehouse.settings()
    path = stages.report(store, settings, context.partition_key)
    verdict = stages.verdict(store, settings, context.partition_key)
    figures = {name: float(verdict[name]) for name in ("exposed_comm_share", "utilization", "full_rate_sf", "estimated_sf")
               if verdict[name] is not None}
    return dg.MaterializeResult(metadata={
        "verdict": dg.MetadataValue.md(f"**{verdict['bottleneck']}**. {verdict['explanation']}"),
        **figures,
        "path": dg.MetadataValue.path(str(path)),
        "url": dg.MetadataValue.url(path.as_uri()),
    })
