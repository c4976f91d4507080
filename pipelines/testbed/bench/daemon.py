"""Runs per minute through the real deployment path: landing folder, sensor, Dagster daemon.

`python -m pipelines.testbed.bench.daemon [--runs N] [--concurrent K]` writes N finished run folders (each
holding the example trace) into a fresh landing folder, starts `dagster-daemon run` on this
repository's workspace with a fresh DAGSTER_HOME (SQLite storage, a queued run coordinator that
runs K at once), and waits until every run's report is materialised. It prints how long the sensor
took to ask for them and the runs per minute from the first run's start to the last one's end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SOURCE = REPO / "examples" / "nccl_data.json.gz"


def main(argv: list[str] | None = None) -> int:
    import dagster as dg

    parser = argparse.ArgumentParser(prog="python -m pipelines.testbed.bench.daemon", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="run folders to drop into the landing folder (default 20)")
    parser.add_argument("--concurrent", type=int, default=2, help="Dagster runs at once (default 2, one per core here)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before giving up (default 1800)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="wirespeed-daemon-"))
    home, landing, warehouse = root / "dagster_home", root / "landing", root / "warehouse"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: QueuedRunCoordinator\n"
        f"  config:\n    max_concurrent_runs: {args.concurrent}\n"
        "telemetry:\n  enabled: false\n"
    )
    for index in range(args.runs):
        folder = landing / f"run-{index:04d}"
        (folder / "traces").mkdir(parents=True)
        shutil.copy(SOURCE, folder / "traces" / SOURCE.name)
        (folder / "manifest.json").write_text(json.dumps({"run_id": folder.name, "job": "daemon-bench"}))
        (folder / "_DONE").touch()
    env = {**os.environ, "DAGSTER_HOME": str(home), "WIRESPEED_HOME": str(warehouse), "WIRESPEED_LANDING": str(landing)}
    unfinished = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]

    # Its storages' tables made before the daemon starts: two processes making them at once collide.
    instance = dg.DagsterInstance.from_config(str(home))
    instance.get_run_records(limit=1), instance.all_instigator_state()
    instance.get_materialized_partitions(dg.AssetKey("run_report"))

    started = time.time()
    daemon = subprocess.Popen(
        [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(REPO / "workspace.yaml")],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(root / "daemon.log", "w"), start_new_session=True,
    )
    try:
        done, busy = set(), True
        while (len(done) < args.runs or busy) and time.time() - started < args.timeout:
            time.sleep(2)
            done = instance.get_materialized_partitions(dg.AssetKey("run_report"))
            busy = bool(instance.get_run_records(dg.RunsFilter(statuses=unfinished)))
        records = instance.get_run_records()
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(timeout=60)
    if len(done) < args.runs:
        print(f"only {len(done)} of {args.runs} runs were ingested in {args.timeout:.0f} s; see {root / 'daemon.log'}")
        return 1
    begun = min(r.start_time for r in records if r.start_time)
    ended = max(r.end_time for r in records if r.end_time)
    failed = sum(1 for r in records if r.dagster_run.status != dg.DagsterRunStatus.SUCCESS)
    print(f"{args.runs} runs of the 10 MB example trace, {args.concurrent} Dagster runs at once, {os.cpu_count()} cores:")
    print(f"  daemon start to first run start {begun - started:.1f} s (the sensor's first tick)")
    print(f"  first run start to last run end {ended - begun:.1f} s: {args.runs / (ended - begun) * 60:.1f} runs per minute"
          f" ({len(records)} Dagster run{'' if len(records) == 1 else 's'}, {failed} not successful)")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
