"""Per-run assets: the parse tables and the analysis tables of each run partition.

Both multi-assets write into one staging version of the run, keyed by the Dagster run, and the
last of them in the Dagster run publishes it: a query sees a run's previous version until every
table of the new one is written, then all of the new one at once. The analysis stage reads the
parse tables of the same staging version when the parse stage ran in this Dagster run, and the
published ones otherwise, so re-running the analysis never re-reads a raw trace.
"""

from pathlib import Path

import dagster as dg

from pipelines import checks, sql
from pipelines.analysis import analyze_run, lineage, open_version
from pipelines.defs.partitions import runs_partitions
from pipelines.defs.resources import IngestProgress, WarehouseResource
from pipelines.ingest import parse_run
from pipelines.sources import RunSource, discover
from pipelines.warehouse import ANALYSIS_TABLES, PARSE_TABLES, TABLES, Warehouse

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


def run_source(resource: WarehouseResource, warehouse: Warehouse, run_id: str) -> RunSource:
    """Where a partition's raw inputs are: as registered by `wirespeed ingest`, else in the landing folder."""
    registered = warehouse.source_of(run_id)
    if registered is not None:
        path, overrides = registered
        source = discover(path, run_id)
        source.overrides = overrides
        return source
    landing = Path(resource.landing).absolute()
    candidate = landing / run_id
    if "/" in run_id or run_id in (".", "..") or candidate.resolve().parent != landing.resolve():
        raise dg.Failure(f"run id {run_id!r} does not name a folder of the landing folder {landing}")
    return discover(candidate, run_id)


def _this_run_materializes(context: dg.AssetExecutionContext, names: tuple[str, ...]) -> bool:
    selection = context.run.asset_selection
    if selection is None:
        return True
    return any(dg.AssetKey(name) in selection for name in names)


def _results(verdicts: list[checks.Verdict]):
    for verdict in verdicts:
        yield dg.AssetCheckResult(
            asset_key=verdict.table,
            check_name=verdict.name,
            passed=verdict.outcome.passed,
            severity=dg.AssetCheckSeverity.WARN,
            description=verdict.outcome.summary,
            metadata=verdict.outcome.metadata,
        )


@dg.multi_asset(
    specs=[_spec(name, "ingest") for name in PARSE_TABLES],
    check_specs=_check_specs(checks.PARSE_CHECKS),
    partitions_def=runs_partitions,
    pool=INGEST_POOL,
    can_subset=False,
    required_resource_keys={"warehouse", "ingest_progress"},
)
def normalized_run(context: dg.AssetExecutionContext):
    """Read a run's raw traces once and normalise them into its parse tables."""
    warehouse: WarehouseResource = context.resources.warehouse
    progress: IngestProgress = context.resources.ingest_progress
    run_id = context.partition_key
    store = warehouse.open()
    settings = warehouse.settings()
    source = run_source(warehouse, store, run_id)
    version = store.start_version(run_id, context.run.run_id, carry_tables=())
    summary = parse_run(source, version, store, settings, progress.advance)
    context.log.info(
        f"{run_id}: {summary.files} trace files, {summary.ranks} ranks, {summary.events} events in {summary.seconds:.1f} s"
    )
    if summary.issues:
        errors = sum(1 for issue in summary.issues if issue.severity == "error")
        context.log.warning(f"{run_id}: {len(summary.issues)} parse issues ({errors} errors); see the parse_issues table")
    for issue in summary.issues:
        context.log.info(f"{issue.where()}: {issue.reason}")
    if not _this_run_materializes(context, ANALYSIS_TABLES):
        store.publish(run_id, version)
    con = open_version(version, settings, run_id, PARSE_TABLES)
    try:
        counts = {name: con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0] for name in PARSE_TABLES}
        verdicts = [checks.judge(check, con) for check in checks.PARSE_CHECKS]
    finally:
        con.close()
    for name in PARSE_TABLES:
        yield dg.MaterializeResult(
            asset_key=name,
            metadata={"dagster/row_count": counts[name], "source": str(source.path), "version": str(version)},
        )
    yield from _results(verdicts)


@dg.multi_asset(
    specs=[_spec(name, "analysis") for name in ANALYSIS_TABLES],
    check_specs=_check_specs(checks.ANALYSIS_CHECKS),
    partitions_def=runs_partitions,
    pool=INGEST_POOL,
    can_subset=False,
)
def analyzed_run(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    """Compute a run's steps, collectives and breakdowns from its parse tables, with SQL only."""
    run_id = context.partition_key
    store = warehouse.open()
    settings = warehouse.settings()
    if not store.staging(run_id, context.run.run_id).exists() and store.published(run_id) is None:
        raise dg.Failure(f"run {run_id!r} has not been ingested: materialize its parse tables first")
    version = store.start_version(run_id, context.run.run_id, carry_tables=PARSE_TABLES)
    summary = analyze_run(run_id, version, store, settings)
    store.publish(run_id, version)
    context.log.info(f"{run_id}: analysis in {summary.seconds:.1f} s: {summary.rows}")
    con = open_version(version, settings, run_id, TABLES)
    try:
        verdicts = [checks.judge(check, con) for check in checks.ANALYSIS_CHECKS]
        exposed = con.execute(
            "SELECT sum(exposed_comm_ns) / nullif(sum(step_ns), 0) FROM step_breakdown"
        ).fetchall()[0][0]
    finally:
        con.close()
    for name in ANALYSIS_TABLES:
        metadata = {"dagster/row_count": summary.rows[name]}
        if name == "step_breakdown" and exposed is not None:
            metadata["exposed_comm_share"] = float(exposed)
        yield dg.MaterializeResult(asset_key=name, metadata=metadata)
    yield from _results(verdicts)
