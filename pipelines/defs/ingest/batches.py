"""Many small runs in one Dagster run: what the sensor asks for when several land at once.

Each Dagster run is a process that loads Dagster and the code location (about 7 s here) before it
ingests anything, longer than a small run's ingest. A batch pays that once for many runs: it runs
the same stages as the assets, as `wirespeed ingest` does (small runs in a pool of one process per
core, the roll-ups updated once, then the reports), and records for every run the materialisations
and check evaluations its assets would have, each under the run's partition. A run that fails
fails alone: the others are recorded, and the batch then fails naming it.
"""

import os
from pathlib import Path

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id  # no public API batches

from pipelines import stages
from pipelines.defs.ingest.assets import INGEST_POOL, check_fields
from pipelines.defs.ingest.jobs import ingest_executor
from pipelines.defs.reports.assets import regression_check, report_metadata
from pipelines.defs.resources import IngestProgress, WarehouseResource
from pipelines.stage_runner import SMALL_RUN_BYTES, Directly, failed
from pipelines.warehouse import sql

# Small runs that land together are ingested this many to a Dagster run, which then loads Dagster
# and the code location once for all of them.
BATCH_RUNS = 10
# An asset's materialisations for a batch's runs are stored in one write, as Dagster stores an
# asset's outputs over several partitions, where the instance writes such batches (PostgreSQL:
# 340 materialisations 4.6 s one by one, 0.8 s in batches of ten); Dagster batches only when this is set.
os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", str(BATCH_RUNS))


def small_batches(sizes: dict[str, int]) -> list[list[str]]:
    """The runs of `sizes` (run id: raw bytes) small enough to share a Dagster run, BATCH_RUNS to a
    batch in their order; a run that would be alone in its batch is in none."""
    small = [run_id for run_id, size in sizes.items() if size <= SMALL_RUN_BYTES]
    return [batch for start in range(0, len(small), BATCH_RUNS) if len(batch := small[start : start + BATCH_RUNS]) > 1]


class Batch(dg.Config):
    run_ids: list[str]


@dg.op(pool=INGEST_POOL)
def ingest_runs(context: dg.OpExecutionContext, config: Batch, warehouse: WarehouseResource) -> None:
    """Parse, analyse and report each run of the batch, and record each one's assets and checks."""
    store, settings = warehouse.open(), warehouse.settings()
    landing = Path(warehouse.landing)
    outcomes, sizes = {}, {}
    for run_id in config.run_ids:
        try:
            source = stages.run_source(store, landing, run_id)
        except (OSError, stages.StageError) as problem:  # gone since the sensor saw it, say
            outcomes[run_id] = failed(problem)
            continue
        sizes[run_id] = source.input_bytes
    runner = Directly(store, sizes, landing)
    outcomes.update({run_id: runner.run(run_id, IngestProgress()) for run_id in sizes})
    runner.finish(outcomes)
    ingested = [run_id for run_id, outcome in outcomes.items() if outcome.error is None]
    materialized: dict[str, list[tuple[str, dict]]] = {}  # asset: (run id, metadata) of each run
    checks: list[dg.AssetCheckEvaluation] = []
    con = store.connect(settings.duckdb_config(), runs=ingested, tables=("verdict", "regressions"))
    try:
        for run_id in ingested:
            for stage in outcomes[run_id].outcomes:
                for line in stage.info:
                    context.log.info(line)
                for line in stage.warnings:
                    context.log.warning(line)
                for name, metadata in stage.tables.items():
                    materialized.setdefault(name, []).append((run_id, metadata))
                checks += [dg.AssetCheckEvaluation(dg.AssetKey(v.table), partition=run_id, **check_fields(v)) for v in stage.verdicts]
            sql.set_variables(con, run_id=run_id)
            report = report_metadata(sql.report_rows(con, "verdict")[0], store.report_path(run_id))
            materialized.setdefault("run_report", []).append((run_id, report))
            regression = regression_check(sql.report_rows(con, "regressions"), settings.regression_severity)
            checks.append(dg.AssetCheckEvaluation(dg.AssetKey("run_report"), "no_regression", partition=run_id, **regression))
    finally:
        con.close()
    # Every asset's materialisations before any check of it, as an asset's own step records them.
    _record_materializations(context, materialized)
    for check in checks:
        context.log_event(check)
    failures = {run_id: outcome.error for run_id, outcome in outcomes.items() if outcome.error is not None}
    if failures:
        raise dg.Failure(
            f"{len(failures)} of {len(outcomes)} runs failed: " + "; ".join(f"{r}: {e}" for r, e in failures.items()),
            metadata={"failed": sorted(failures), "ingested": ingested, "errors": dg.MetadataValue.json(failures)},
        )


def _record_materializations(context: dg.OpExecutionContext, runs_of: dict[str, list[tuple[str, dict]]]) -> None:
    """Record each asset's materialisations, (run id, metadata) under the run's partition, as one
    event batch (context.log_event would write them one by one)."""
    step = context.get_step_execution_context()
    for name, runs in runs_of.items():
        batch = generate_event_batch_id()
        for index, (run_id, metadata) in enumerate(runs):
            materialization = dg.AssetMaterialization(name, partition=run_id, metadata=metadata)
            DagsterEvent.asset_materialization(step, materialization, DagsterEventBatchMetadata(batch, index == len(runs) - 1))


@dg.job(
    description="Ingest several landed runs in one Dagster run (the sensor's batches): parse, analyse, report each.",
    executor_def=ingest_executor(),
)
def ingest_batch_job():
    ingest_runs()
