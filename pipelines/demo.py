"""`wirespeed demo`: the whole product on an embedded default, from capture to report.

It captures a real two-rank gloo DDP job with the collectors (CPU only), ingests it together with
a real A100 NCCL trace shipped in `examples/`, writes both reports and prints, per run, how much
of the step time was exposed communication.
"""

from __future__ import annotations

import sys
from pathlib import Path

from collectors.launch import collect, new_run_id
from pipelines.materialize import ingest_paths

DEMO_TRACE = "nccl_data.json.gz"


def run_demo(warehouse_dir: Path, landing_dir: Path, examples: Path) -> int:
    print(f"1/3 capturing a 2-rank gloo DDP run into {landing_dir} ...", flush=True)
    command = [sys.executable, "-m", "collectors.demo_ddp", "--world-size", "2", "--steps", "8"]
    run_dir, exit_code = collect(landing_dir, command, f"demo-gloo-{new_run_id()}", tags={"job": "demo-ddp-gloo"})
    if exit_code != 0:
        print(f"the demo training job failed with exit code {exit_code}", file=sys.stderr)
        return exit_code
    trace = examples / DEMO_TRACE
    print(f"2/3 ingesting {run_dir.name} and {trace.name} into {warehouse_dir} ...", flush=True)
    results = ingest_paths([run_dir, trace], warehouse_dir)
    print("3/3 results:")
    for result in results:
        print(f"  {result.describe()}")
    return 0 if all(r.success for r in results) else 1
