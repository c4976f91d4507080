"""Per-run assets: the parse tables and the analysis tables of each run partition.

Each runs stages of pipelines/stages.py: the parse as a plan, a step per shard of trace files
and a finish, the analysis as one step. Both write into one staging version of the run, keyed by
the Dagster run, and the last of them in the Dagster run publishes it: a query sees a run's previous version until every
table of the new one is written, then all of the new one at once. The analysis stage reads the
parse tables of the same staging version when the parse stage ran in this Dagster run, and the
published ones otherwise, so re-running the analysis never re-reads a raw trace.
"""

from pathlib import Path

import dagster as dg

from pipelines import checks, stages
from pipelines.analysis.tables import lineage
from pipelines.defs.partitions import runs_partitions
from pipelines.defs.resources import WarehouseResource
from pipelines.warehouse import sql
from pipelines.warehouse.store import ANALYSIS_TABLES, PARSE_TABLES

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


def _log(context: dg.OpExecutionContext, outcome: stages.StageOutcome) -> None:
    for line in outcome.info:
        context.log.info(line)
    for line in outcome.warnings:
        context.log.warning(line)


def _results(context: dg.AssetExecutionContext, outcome: stages.StageOutcome):
    """Log the stage's lines, then materialise its tables and report its checks."""
    _log(context, outcome)
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


PARSE_CHECKS = _check_specs(checks.PARSE_CHECKS)
# The finish's outputs, in order: a parse table each, then a check each.
PARSE_OUTPUTS = (*PARSE_TABLES, *(check.get_python_identifier() for check in PARSE_CHECKS))


@dg.op(out=dg.DynamicOut(list), pool=INGEST_POOL, required_resource_keys={"warehouse"})
def plan_parse(context: dg.OpExecutionContext):
    """The run's trace files in shards of about `[resources] shard_mb` each, a parse step apiece."""
    warehouse: WarehouseResource = context.resources.warehouse
    shards = _staged(stages.plan_parse, warehouse.open(), warehouse.settings(), Path(warehouse.landing),
                     context.partition_key, context.run.run_id)
    context.log.info(f"{context.partition_key}: {sum(map(len, shards))} trace files in {len(shards)} shards")
    for shard, files in enumerate(shards):
        yield dg.DynamicOutput(files, mapping_key=f"shard_{shard}")


@dg.op(pool=INGEST_POOL, required_resource_keys={"warehouse", "ingest_progress"})
def parse_shard(context: dg.OpExecutionContext, files: list) -> dict:
    """Parse one shard's trace files into the run's staging version, on whichever worker runs it."""
    warehouse: WarehouseResource = context.resources.warehouse
    shard = int(context.get_mapping_key().removeprefix("shard_"))
    record = _staged(stages.parse_shard, warehouse.open(), warehouse.settings(), Path(warehouse.landing),
                     context.partition_key, context.run.run_id, shard, files, context.resources.ingest_progress.advance)
    context.log.info(f"{context.partition_key}: shard {shard} ({len(files)} files) parsed on {record['host']} "
                     f"in {record['seconds']:.1f} s")
    return record


@dg.op(
    out={name: dg.Out(dg.Nothing) for name in PARSE_OUTPUTS},
    pool=INGEST_POOL,
    required_resource_keys={"warehouse", "ingest_progress"},
)
def finish_parse(context: dg.OpExecutionContext, shards: list):
    """Once every shard is parsed: the run's other parse tables, the parse checks, and the
    version published when no analysis follows in this Dagster run."""
    warehouse: WarehouseResource = context.resources.warehouse
    hosts = sorted({shard["host"] for shard in shards})
    context.log.info(f"{context.partition_key}: {len(shards)} shards parsed on {', '.join(hosts)}")
    publish = not _this_run_materializes(context, ANALYSIS_TABLES)
    outcome = _staged(stages.finish_parse, warehouse.open(), warehouse.settings(), Path(warehouse.landing),
                      context.partition_key, context.run.run_id, context.resources.ingest_progress.advance, publish)
    _log(context, outcome)
    for name, metadata in outcome.tables.items():
        yield dg.Output(None, output_name=name, metadata={**metadata, "parse_hosts": ", ".join(hosts)})
    for verdict in outcome.verdicts:
        yield dg.AssetCheckResult(asset_key=verdict.table, **check_fields(verdict))


@dg.graph_multi_asset(
    outs={name: dg.AssetOut.from_spec(_spec(name, "ingest")) for name in PARSE_TABLES},
    check_specs=PARSE_CHECKS,
    partitions_def=runs_partitions,
    group_name="ingest",
    can_subset=False,
)
def normalized_run():
    """Read a run's raw inputs once and normalise them into its parse tables: its trace files in
    shards, each a step that any worker sharing the warehouse can run, then the rest."""
    finished = finish_parse(plan_parse().map(parse_shard).collect())
    return dict(zip(PARSE_OUTPUTS, finished, strict=True))


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
