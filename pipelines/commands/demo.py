"""`wirespeed demo`: the whole product on an embedded default, from capture to verdict.

It captures a real two-rank gloo DDP job with the collectors (CPU only), ingests it together with
a real A100 NCCL trace shipped in `examples/`, writes both reports and prints, per run, the
verdict: exposed communication, the line rate and how much of it the collectives used, and the
scaling factor now and at full line rate. Where the machine allows (root, `ip`, `tc`), the job
runs on two emulated hosts joined by a 1 Gbit/s link (pipelines/testbed/cluster.py), each under
its own `wirespeed collect --nnodes 2`, as on a real cluster; else on this host over loopback,
which has no line rate, so the demo assumes one and says so. The A100 trace does not record its link
either: it is ingested as a run folder whose manifest states the line rate assumed.

While it works it shows progress bars and nothing else: the job's own output goes into its run
folder, and failures print the end of it.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from collectors import rundir
from collectors.launch import collect, new_run_id
from pipelines.commands.ingest import ingest_paths
from pipelines.testbed import cluster

DEMO_TRACE = "nccl_data.json.gz"
CLUSTER_LINK_MBIT = 1000
# Loopback has no line rate: the single-host job is judged against this one, and says so.
LOOPBACK_ASSUMED_GBPS = 10.0
# The A100 trace does not say what its ranks' link was: HDR InfiniBand, an A100 node's NIC per GPU.
A100_ASSUMED_GBPS = 200.0
A100_LINK = "HDR InfiniBand, the NIC an A100 node has per GPU"


def run_demo(warehouse_dir: Path, landing_dir: Path, examples: Path, where: str = "auto") -> int:
    """Capture (`where`: "cluster", "single-host" or "auto", the cluster when the machine allows),
    ingest, and print each run's verdict."""
    reason = cluster.unavailable_reason() if where != "single-host" else "--single-host"
    if where == "cluster" and reason:
        print(f"wirespeed demo --cluster: this machine cannot emulate a cluster: {reason}", file=sys.stderr)
        return 1
    notes = []
    if reason:
        captured = _capture_here(landing_dir)
        if where == "auto":
            notes.append(f"no emulated cluster here ({reason}), so the job ran on this host")
        notes.append(f"loopback has no line rate: the job was judged against {LOOPBACK_ASSUMED_GBPS:g} Gbit/s, an assumption")
    else:
        captured = _capture_on_cluster(landing_dir)
    if captured is None:
        return 1
    example = _example_run(landing_dir, examples)
    notes.append(f"{example.name}'s trace does not record its line rate: {A100_ASSUMED_GBPS:g} Gbit/s was assumed ({A100_LINK})")
    results = ingest_paths([captured, example], warehouse_dir)
    for result in results:
        print(result.describe())
    for note in notes:
        print(f"note: {note}")
    return 0 if all(r.success for r in results) else 1


def _capture_here(landing: Path) -> Path | None:
    run_id = f"demo-gloo-{new_run_id()}"
    command = [sys.executable, "-m", "collectors.demo_ddp", "--world-size", "2", "--steps", "8"]
    with _ticking(f"capture {run_id} (2 ranks over loopback)"):
        run_dir, exit_code = collect(landing, command, run_id, tags={"job": "demo-ddp-gloo"},
                                     intra_link_gbps=LOOPBACK_ASSUMED_GBPS, quiet=True)
    if exit_code != 0:
        output = "".join(p.read_text(errors="replace") for p in sorted((run_dir / rundir.OUTPUT).glob("*.log")))
        print(f"the demo training job failed with exit code {exit_code}:\n{output[-4000:]}", file=sys.stderr)
        return None
    return run_dir


def _capture_on_cluster(landing: Path) -> Path | None:
    run_id = f"demo-cluster-{new_run_id()}"
    try:
        with _ticking(f"capture {run_id} (2 emulated hosts, {CLUSTER_LINK_MBIT:g} Mbit/s link)"):
            run = cluster.run_job("ddp", CLUSTER_LINK_MBIT, landing, run_id=run_id)
    except RuntimeError as failure:
        print(f"the demo training job failed on the emulated cluster: {failure}", file=sys.stderr)
        return None
    return run.run_dir


def _example_run(landing: Path, examples: Path) -> Path:
    """The shipped A100 trace as a run folder whose manifest states the line rate assumed."""
    run_dir = landing / f"demo-a100-{new_run_id()}"
    (run_dir / rundir.TRACES).mkdir(parents=True)
    shutil.copy(examples / DEMO_TRACE, run_dir / rundir.TRACES / DEMO_TRACE)
    manifest = {"run_id": run_dir.name, "link_gbps": A100_ASSUMED_GBPS, "link_source": f"assumed by wirespeed demo ({A100_LINK})",
                "tags": {"job": "demo-a100-example"}}
    rundir.write_json_atomically(run_dir / rundir.MANIFEST, manifest)
    (run_dir / rundir.DONE).write_text("demo\n")
    return run_dir


@contextlib.contextmanager
def _ticking(description: str) -> Iterator[None]:
    """A bar that counts the seconds while the block runs (a capture has nothing else to count)."""
    stop = threading.Event()
    with tqdm(desc=description, bar_format="{desc}: {elapsed}") as bar:
        def tick() -> None:
            while not stop.wait(0.5):
                bar.refresh()

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()
