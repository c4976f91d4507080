"""The sensor that turns completed run folders in the landing folder into ingested runs."""

import hashlib
import json
import os
from pathlib import Path

import dagster as dg

from pipelines.defs.ingest.batches import ingest_batch_job, small_batches
from pipelines.defs.ingest.jobs import ingest_job
from pipelines.defs.partitions import runs_partitions
from pipelines.defs.resources import WarehouseResource
from pipelines.read.sources import DONE_MARKER, is_complete_run
from pipelines.warehouse.store import check_run_id


# A tick asks for at most this many runs, those finished first; the rest wait for the next tick,
# so a landing folder that fills with hundreds of runs neither outlasts a tick's time limit nor
# queues them all at once.
MAX_RUNS_PER_TICK = 50


def sensor_interval_s(environ=os.environ) -> int:
    """Seconds between the sensor's looks at the landing folder: 30, or $WIRESPEED_SENSOR_INTERVAL_S
    (a deployment whose runs should start sooner may look more often)."""
    value = environ.get("WIRESPEED_SENSOR_INTERVAL_S", "30")
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"WIRESPEED_SENSOR_INTERVAL_S must be a whole number of seconds, at least 1, not {value!r}")
    return int(value)


def completed_runs(landing: Path) -> dict[str, tuple[str, int]]:
    """Run folders whose `_DONE` marker exists, those finished first, each with a fingerprint of
    its files and their bytes."""
    if not landing.is_dir():
        return {}
    folders = [p for p in landing.iterdir() if p.is_dir() and not p.name.startswith(".") and is_complete_run(p)]
    folders.sort(key=lambda folder: ((folder / DONE_MARKER).stat().st_mtime_ns, folder.name))
    return {folder.name: _fingerprint(folder) for folder in folders}


def _fingerprint(folder: Path) -> tuple[str, int]:
    """Changes whenever a file in the run folder is added, removed, resized or rewritten; and the
    files' bytes."""
    digest = hashlib.sha1()
    size = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        size += stat.st_size
    return digest.hexdigest()[:16], size


@dg.sensor(jobs=[ingest_job, ingest_batch_job], minimum_interval_seconds=sensor_interval_s(), default_status=dg.DefaultSensorStatus.RUNNING)
def landing_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SensorResult | dg.SkipReason:
    """Ingest each run folder once it is complete, and again whenever it changes afterwards: a
    large run, or a small one alone, in a Dagster run of its own; small ones in batches (small_batches)."""
    seen: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    current = completed_runs(Path(warehouse.landing))
    changed, sizes = {}, {}
    for run_id, (fingerprint, size) in current.items():
        if seen.get(run_id) == fingerprint:
            continue
        problem = check_run_id(run_id)
        if problem:
            context.log.warning(f"skipping landing folder {run_id!r}: {problem}")
            continue
        changed[run_id], sizes[run_id] = fingerprint, size
        if len(changed) == MAX_RUNS_PER_TICK:
            break
    if not changed:
        return dg.SkipReason(f"no new or changed run folder with a {DONE_MARKER} marker")
    batches = small_batches(sizes)
    batched = {run_id for batch in batches for run_id in batch}
    requests = [
        dg.RunRequest(job_name=ingest_job.name, partition_key=r, run_key=f"{r}@{f}") for r, f in changed.items() if r not in batched
    ]
    requests += [
        dg.RunRequest(
            job_name=ingest_batch_job.name,
            run_key="batch-" + hashlib.sha1(" ".join(f"{r}@{changed[r]}" for r in batch).encode()).hexdigest()[:16],
            run_config={"ops": {"ingest_runs": {"config": {"run_ids": batch}}}},
            tags={"wirespeed/runs": f"{len(batch)} runs: {batch[0]} ... {batch[-1]}"},
        )
        for batch in batches
    ]
    known = set(context.instance.get_dynamic_partitions(runs_partitions.name))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[runs_partitions.build_add_request(sorted(set(changed) - known))],
        cursor=json.dumps({**seen, **changed}),
    )
