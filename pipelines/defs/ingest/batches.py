"""Many small runs in one Dagster run: what the sensor asks for when several land at once.

Each Dagster run is a process that loads Dagster and the code location (about 7 s here) before it
ingests anything, longer than a small run's ingest. A batch pays that once for many runs: it runs
the same stages as the assets, as `wirespeed ingest` does (small runs in a pool of one process per
core, the roll-ups updated once, then the reports), and records for every run the materialisations
and check evaluations its assets would have, each under the run's partition. A run that fails
fails alone: the others are recorded, and the batch then fails naming it.
"""

from pathlib import Path

import dagster as dg

from pipelines import sql, stages
from pipelines.defs.ingest.assets import INGEST_POOL, check_fields
from pipelines.defs.ingest.jobs import ingest_executor
from pipelines.defs.reports.assets import regression_check, report_metadata
from pipelines.defs.resources import IngestProgress, WarehouseResource
from pipelines.materialize import SMALL_RUN_BYTES, Directly, failed

# Small runs that land together are ingested this many to a Dagster run, which then loads Dagster
# and the code location once for all of them.
BATCH_RUNS = 10


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
    con = store.connect(settings.duckdb_config(), runs=ingested, tables=("verdict", "regressions"))
    try:
        for run_id in ingested:
            for stage in outcomes[run_id].outcomes:
                for line in stage.info:
                    context.log.info(line)
                for line in stage.warnings:
                    context.log.warning(line)
                for name, metadata in stage.tables.items():
                    context.log_event(dg.AssetMaterialization(name, partition=run_id, metadata=metadata))
                for verdict in stage.verdicts:
                    context.log_event(dg.AssetCheckEvaluation(dg.AssetKey(verdict.table), partition=run_id, **check_fields(verdict)))
            sql.set_variables(con, run_id=run_id)
            report = report_metadata(sql.report_rows(con, "verdict")[0], store.report_path(run_id))
            context.log_event(dg.AssetMaterialization("run_report", partition=run_id, metadata=report))
            regression = regression_check(sql.report_rows(con, "regressions"), settings.regression_severity)
            context.log_event(dg.AssetCheckEvaluation(dg.AssetKey("run_report"), "no_regression", partition=run_id, **regression))
    finally:
        con.close()
    failures = {run_id: outcome.error for run_id, outcome in outcomes.items() if outcome.error is not None}
    if failures:
        raise dg.Failure(
            f"{len(failures)} of {len(outcomes)} runs failed: " + "; ".join(f"{r}: {e}" for r, e in failures.items()),
            metadata={"failed": sorted(failures), "ingested": ingested, "errors": dg.MetadataValue.json(failures)},
        )


@dg.job(
    description="Ingest several landed runs in one Dagster run (the sensor's batches): parse, analyse, report each.",
    executor_def=ingest_executor(),
)
def ingest_batch_job():
    ingest_runs()
