"""The job's own traces: plain torchrun jobs that profile themselves (no wirespeed import), under
`wirespeed collect --traces DIR`, on one host and on two hosts of the emulated cluster (each its own
network namespace, host name and working folder, as two machines' disks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO, require_cluster, wirespeed
from collectors.demo_ddp import free_port

# A 2-rank DDP job that profiles two steps the usual way, into its own outputs/traces.
PLAIN_DDP = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

dist.init_process_group("gloo")
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
             on_trace_ready=tensorboard_trace_handler("outputs/traces")) as profiler:
    for _ in range(6):
        optimizer.zero_grad()
        model(torch.randn(32, 64)).sum().backward()
        optimizer.step()
        profiler.step()
dist.destroy_process_group()
"""
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
ENV = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(REPO)}


def job_folder(folder: Path) -> Path:
    """A job's working folder with the script, and a trace from an earlier run in outputs/traces."""
    (folder / "outputs" / "traces").mkdir(parents=True)
    (folder / "train.py").write_text(PLAIN_DDP)
    (folder / "outputs" / "traces" / "earlier.pt.trace.json").write_text('{"traceEvents": []}')
    return folder


def collect_argv(landing: Path, run_id: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(landing), "--run-id", run_id,
            "--traces", "outputs/traces", "--sample-interval-ms", "0", *options, "--"]


def sql_json(warehouse: Path, query: str) -> list[dict]:
    return json.loads(wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json").stdout)


def test_a_plain_torchrun_jobs_own_traces_are_taken_and_the_run_ingests_completely(tmp_path):
    job = job_folder(tmp_path / "job")
    landing, warehouse = tmp_path / "landing", tmp_path / "warehouse"
    result = subprocess.run(
        [*collect_argv(landing, "own"), TORCHRUN, "--nproc-per-node", "2", "--master-port", str(free_port()), "train.py"],
        cwd=job, env=ENV, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    run = landing / "own"
    (line,) = [l for l in result.stdout.splitlines() if l.startswith("run folder:")]
    assert line == f"run folder: {run} (command exited with 0)"
    written = sorted((job / "outputs" / "traces").glob("*.pt.trace.json"))
    assert len(written) == 3  # the earlier run's and this run's two ranks'
    manifest = json.loads((run / "manifest.json").read_text())
    taken = manifest["job_traces"]
    assert sorted(t["source"] for t in taken) == [str(p) for p in written if p.name != "earlier.pt.trace.json"]
    for entry in taken:
        assert (run / entry["file"]).read_bytes() == Path(entry["source"]).read_bytes()
        assert entry["file"].startswith(f"traces/{manifest['launcher_host']}/outputs_traces/")
    assert (job / "outputs" / "traces" / "earlier.pt.trace.json").exists()  # the job's files stay

    ingest = wirespeed("ingest", str(run), "--warehouse", str(warehouse), "--quiet")
    assert "own: exposed communication" in ingest.stdout and "no traces" not in ingest.stdout
    ranks = sql_json(warehouse, "SELECT rank, trace_file FROM ranks ORDER BY rank")
    assert [r["rank"] for r in ranks] == [0, 1] and {r["trace_file"] for r in ranks} == {str(run / t["file"]) for t in taken}
    assert sql_json(warehouse, "SELECT * FROM parse_issues") == []


def test_on_two_hosts_each_takes_its_own_ranks_traces(tmp_path):
    """On the emulated cluster: each host its own network namespace, host name and working folder."""
    require_cluster()
    from pipelines.testbed.cluster import INTERFACE, Cluster

    landing, warehouse = tmp_path / "landing", tmp_path / "warehouse"
    with Cluster(hosts=2, link_mbit=1000) as cluster:
        hosts = []
        for node in (0, 1):
            job = job_folder(tmp_path / f"host{node}")
            torchrun = [TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                        "--master-addr", cluster.hosts[0].address, "--master-port", "29500", "train.py"]
            hosts.append(cluster.popen(node, [*collect_argv(landing, "two", "--nnodes", "2"), *torchrun], cwd=job,
                                       env={**ENV, "GLOO_SOCKET_IFNAME": INTERFACE},
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for launched in hosts:
            stdout, stderr = launched.communicate(timeout=300)
            assert launched.returncode == 0, stderr
            assert "no traces" not in stdout
    run = landing / "two"
    manifest = json.loads((run / "manifest.json").read_text())
    assert sorted((t["host"], Path(t["source"]).parent.parent.parent.name) for t in manifest["job_traces"]) == [
        ("host0", "host0"), ("host1", "host1")]  # each host took the trace its own rank wrote
    wirespeed("ingest", str(run), "--warehouse", str(warehouse), "--quiet")
    ranks = sql_json(warehouse, "SELECT rank, trace_file FROM ranks ORDER BY rank")
    assert [(r["rank"], Path(r["trace_file"]).relative_to(run).parts[:2]) for r in ranks] == [
        (0, ("traces", "host0")), (1, ("traces", "host1"))]
    assert sql_json(warehouse, "SELECT * FROM parse_issues") == []


def test_a_run_folder_without_traces_says_so_on_the_result_line(tmp_path):
    """Without --traces and without Capture, or with --traces naming a folder the job left alone."""
    job = job_folder(tmp_path / "job")
    for run_id, options in (("bare", []), ("untouched", ["--traces", "outputs/traces"])):
        result = wirespeed("collect", "--landing", str(tmp_path / "landing"), "--run-id", run_id, *options,
                           "--", sys.executable, "-c", "pass", cwd=job, env=ENV)
        assert result.stdout.splitlines()[-1] == (
            f"run folder: {tmp_path / 'landing' / run_id} (command exited with 0); no traces: pass --traces DIR, or use Capture")
