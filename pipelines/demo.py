"""`wirespeed demo`: the whole product on an embedded default, from capture to report.

It captures a real two-rank gloo DDP job with the collectors (CPU only), ingests it together with
a real A100 NCCL trace shipped in `examples/`, writes both reports and prints, per run, how much
of the step time was exposed communication. With `--cluster` the DDP job runs on two emulated
hosts (network namespaces joined by a 1 Gbit/s link, see pipelines/cluster.py), each under its
own `wirespeed collect --nnodes 2`, as on a real cluster.
"""

from __future__ import annotations

import sys
from pathlib import Path

from collectors.launch import collect, new_run_id
from pipelines import cluster
from pipelines.materialize import ingest_paths

DEMO_TRACE = "nccl_data.json.gz"
CLUSTER_LINK_MBIT = 1000


def run_demo(warehouse_dir: Path, landing_dir: Path, examples: Path) -> int:
    print(f"1/3 capturing a 2-rank gloo DDP run into {landing_dir} ...", flush=True)
    command = [sys.executable, "-m", "collectors.demo_ddp", "--world-size", "2", "--steps", "8"]
    run_dir, exit_code = collect(landing_dir, command, f"demo-gloo-{new_run_id()}", tags={"job": "demo-ddp-gloo"})
    if exit_code != 0:
        print(f"the demo training job failed with exit code {exit_code}", file=sys.stderr)
        return exit_code
    return _ingest_and_print(run_dir, warehouse_dir, examples)


def run_cluster_demo(warehouse_dir: Path, landing_dir: Path, examples: Path) -> int:
    reason = cluster.unavailable_reason()
    if reason:
        print(f"wirespeed demo --cluster: this machine cannot emulate a cluster: {reason}", file=sys.stderr)
        return 1
    print(f"1/3 capturing gloo DDP on two emulated hosts ({CLUSTER_LINK_MBIT} Mbit/s link) into {landing_dir} ...", flush=True)
    try:
        run = cluster.run_job("ddp", CLUSTER_LINK_MBIT, landing_dir, run_id=f"demo-cluster-{new_run_id()}")
    except RuntimeError as failure:
        print(f"the demo training job failed on the emulated cluster: {failure}", file=sys.stderr)
        return 1
    print(f"    median step {run.median_step_ns / 1e6:.0f} ms as the job measured it", flush=True)
    return _ingest_and_print(run.run_dir, warehouse_dir, examples)


def _ingest_and_print(run_dir: Path, warehouse_dir: Path, examples: Path) -> int:
    trace = examples / DEMO_TRACE
    print(f"2/3 ingesting {run_dir.name} and {trace.name} into {warehouse_dir} ...", flush=True)
    results = ingest_paths([run_dir, trace], warehouse_dir)
    print("3/3 results:")
    for result in results:
        print(f"  {result.describe()}")
    return 0 if all(r.success for r in results) else 1
