"""Per-run assets: the parse tables and the analysis tables of each run partition.

Each runs one stage of pipelines/stages.py. Both write into one staging version of the run, keyed by the Dagster run, and the
last of them in the Dagster run publishes it: a query sees a run's previous version until every
table of the new one is written, then all of the new one at once. The analysis stage reads the
parse tables of the same staging version when the parse stage ran in this Dagster run, and the
published ones otherwise, so re-running the analysis never re-reads a raw trace.
"""

from pathlib import Path

import dagster as dg

from pipelines import checks, sql, stages
from pipelines.analysis import lineage
from pipelines.defs.partitions import runs_partitions
from pipelines.defs.resources import IngestProgress, WarehouseResource
from pipelines.warehouse import ANALYSIS_TABLES, PARSE_TABLES

INGEST_POOL = "wirespeed_ingest"
# Which tables each analysis table is derived from, read from its SQL.
_DEPS = lineage()


def _spec(name: str, group: str) -> dg.AssetSpec:
    table = sql.table(name)
    return dg.AssetSpec(
        name,
        group_name=group,
        description=f"{table.summary}\n\nGrain: {table.grain}.",
        kinds={"parquet", "duckdb"},
        deps=_DEPS.get(name, []),
        metadata={
            "dagster/column_schema": dg.TableSchema(
                columns=[dg.TableColumn(c.name, c.type, description=c.doc) for c in table.columns]
            )
        },
    )


def _check_specs(functions) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(f.__name__, asset=f.table, description=f.__doc__) for f in functions]


def _this_run_materializes(context: dg.AssetExecutionContext, names: tuple[str, ...]) -> bool:
    selection = context.run.asset_selection
    if selection is None:
        return True
    return any(dg.AssetKey(name) in selection for name in names)


def _staged(stage, *arguments) -> stages.StageOutcome:
    try:
        return stage(*arguments)
    except stages.StageError as problem:
        raise dg.Failure(str(problem)) from problem


def _results(context: dg.AssetExecutionContext, outcome: stages.StageOutcome):
    """Log the stage's lines, then materialise its tables and report its checks."""
    for line in outcome.info:
        context.log.info(line)
    for line in outcome.warnings:
        context.log.warning(line)
    for name, metadata in outcome.tables.items():
        yield dg.MaterializeResult(asset_key=name, metadata=metadata)
    for verdict in outcome.verdicts:
        yield dg.AssetCheckResult(asset_key=verdict.table, **check_fields(verdict))


def check_fields(verdict: checks.Verdict) -> dict:
    """A check's result as Dagster records it, from its verdict."""
    return {
        "check_name": verdict.name,
        "passed": verdict.outcome.passed,
        "severity": dg.AssetCheckSeverity.WARN,
        "description": verdict.outcome.summary,
        "metadata": verdict.outcome.metadata,
    }


@dg.multi_asset(
    specs=[_spec(name, "ingest") for name in PARSE_TABLES],
    check_specs=_check_specs(checks.PARSE_CHECKS),
    partitions_def=runs_partitions,
    pool=INGEST_POOL,
    can_subset=False,
    required_resource_keys={"warehouse", "ingest_progress"},
)
def normalized_run(context: dg.AssetExecutionContext):
    """Read a run's raw inputs once and normalise them into its parse tables."""
    warehouse: WarehouseResource = context.resources.warehouse
    progress: IngestProgress = context.resources.ingest_progress
    publish = not _this_run_materializes(context, ANALYSIS_TABLES)
    outcome = _staged(
        stages.parse, warehouse.open(), warehouse.settings(), Path(warehouse.landing), context.partition_key,
        context.run.run_id, progress.advance, publish,
    )
    yield from _results(context, outcome)


@dg.multi_asset(
    specs=[_spec(name, "analysis") for name in ANALYSIS_TABLES],
    check_specs=_check_specs(checks.ANALYSIS_CHECKS),
    partitions_def=runs_partitions,
    pool=INGEST_POOL,
    can_subset=False,
)
def analyzed_run(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    """Compute a run's steps, collectives and breakdowns from its parse tables, with SQL only."""
    outcome = _staged(stages.analyze, warehouse.open(), warehouse.settings(), context.partition_key, context.run.run_id)
    yield from _results(context, outcome)
