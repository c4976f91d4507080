"""A live capture: a real 2-rank gloo DDP job under `wirespeed collect`, ingested by `wirespeed ingest`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import GLOO_RANKS, REPO, demo_answers, wirespeed
from pipelines.read.sources import discover

RANKS = list(range(GLOO_RANKS))


def test_collect_writes_a_complete_run_folder(gloo_run):
    assert (gloo_run / "_DONE").is_file()
    assert sorted(p.name for p in (gloo_run / "traces").iterdir()) == [f"rank{r}.pt.trace.json" for r in RANKS]
    manifest = json.loads((gloo_run / "manifest.json").read_text())
    assert manifest["run_id"] == "gloo-live" and manifest["world_size"] == GLOO_RANKS and manifest["backend"] == "gloo"
    assert manifest["exit_code"] == 0 and manifest["failures"] == []
    assert manifest["link_gbps"] == 25.0 and manifest["link_source"] == "override" and manifest["link_interface"] == "lo"
    assert manifest["intra_link_gbps"] == 40.0
    assert manifest["tags"]["job"] == "test-job" and manifest["torch_version"].startswith("2.13.0")
    assert [r["rank"] for r in manifest["ranks"]] == RANKS
    (sampling,) = manifest["sampling"]
    assert sampling["interval_ms"] == 100 and sampling["samples"] > 10 and sampling["failure"] is None
    # The marker comes last: nothing in the folder is newer than it.
    done = (gloo_run / "_DONE").stat().st_mtime_ns
    assert all(p.stat().st_mtime_ns <= done for p in gloo_run.rglob("*") if p.is_file())


def test_collect_sets_up_nccl_logging_for_the_job(tmp_path):
    command = ["--", "python3", "-c", "import os; print(os.environ['NCCL_DEBUG'], os.environ['NCCL_DEBUG_SUBSYS'], os.environ['NCCL_DEBUG_FILE'])"]
    result = wirespeed("collect", "--landing", str(tmp_path), "--run-id", "env", *command)
    printed = result.stdout.splitlines()[0].split()
    assert printed[:2] == ["INFO", "INIT,COLL,ENV"]
    assert printed[2] == str(tmp_path / "env" / "nccl" / "nccl.%h.%p.log")


def test_failing_command_still_leaves_a_finished_run(tmp_path):
    result = wirespeed("collect", "--landing", str(tmp_path), "--run-id", "fails", "--", "python3", "-c", "raise SystemExit(3)", check=False)
    assert result.returncode == 3
    manifest = json.loads((tmp_path / "fails" / "manifest.json").read_text())
    assert manifest["exit_code"] == 3 and (tmp_path / "fails" / "_DONE").exists()


@pytest.fixture(scope="module")
def gloo_warehouse(gloo_run, tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("gloo") / "warehouse"
    result = wirespeed("ingest", str(gloo_run), "--warehouse", str(warehouse), "--quiet")
    assert "gloo-live: exposed communication" in result.stdout
    return warehouse


def sql_json(warehouse, query: str) -> list[dict]:
    return json.loads(wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json").stdout)


def test_live_run_ingests_on_the_cpu_timeline(gloo_warehouse):
    (run,) = sql_json(gloo_warehouse, "SELECT * FROM runs")
    assert run["source_kind"] == "collector" and run["world_size"] == GLOO_RANKS and run["ranks_found"] == GLOO_RANKS
    assert run["link_gbps"] == 25.0 and run["job"] == "test-job" and run["parse_errors"] == 0
    steps = sql_json(gloo_warehouse, "SELECT rank, count(*) AS n, any_value(timeline) AS timeline FROM steps GROUP BY rank ORDER BY rank")
    assert steps == [{"rank": r, "n": 4, "timeline": "cpu"} for r in RANKS]


def test_live_run_breakdown(gloo_warehouse):
    rows = sql_json(gloo_warehouse, "SELECT * FROM step_breakdown ORDER BY rank, step")
    assert len(rows) == 4 * GLOO_RANKS
    for row in rows:
        assert row["step_ns"] == row["compute_ns"] + row["exposed_comm_ns"] + row["other_ns"] + row["idle_ns"]
        assert row["compute_ns"] > 0 and row["comm_ns"] > 0 and row["other_ns"] == 0
    # DDP all-reduces buckets during backward: some communication is hidden, some not.
    assert sum(r["overlap_ns"] for r in rows) > 0 and sum(r["exposed_comm_ns"] for r in rows) > 0


def test_live_run_collectives_have_sizes(gloo_warehouse):
    rows = sql_json(
        gloo_warehouse,
        "SELECT rank, op, count(*) AS n, min(bytes) AS min_bytes, sum(bytes) AS total, any_value(group_size) AS g, "
        "count(DISTINCT seq) AS seqs FROM collectives GROUP BY rank, op ORDER BY rank",
    )
    assert [r["rank"] for r in rows] == RANKS and {r["op"] for r in rows} == {"allreduce"}
    # Every gradient is all-reduced once per step: every rank moves the same bytes.
    assert len({r["total"] for r in rows}) == 1 and rows[0]["total"] > 4 * (6 * 512 * 512) * 4
    assert all(r["min_bytes"] > 0 and r["g"] == GLOO_RANKS and r["seqs"] == r["n"] for r in rows)


def test_reingest_replaces_the_run(gloo_run, gloo_warehouse):
    before = sql_json(gloo_warehouse, "SELECT count(*) AS n FROM trace_events")[0]["n"]
    wirespeed("ingest", str(gloo_run), "--warehouse", str(gloo_warehouse), "--quiet")
    after = sql_json(gloo_warehouse, "SELECT count(*) AS n, count(DISTINCT run_id) AS runs FROM trace_events")[0]
    assert after == {"n": before, "runs": 1}
    assert sql_json(gloo_warehouse, "SELECT count(*) AS n FROM runs") == [{"n": 1}]


def test_discover_reads_the_run_folder(gloo_run):
    source = discover(gloo_run)
    assert source.run_id == "gloo-live" and source.kind == "collector" and len(source.trace_files) == GLOO_RANKS
    assert len(source.net_sample_files) == len(source.cpu_sample_files) == 1
    assert source.net_sample_files[0].name.startswith("net.") and source.cpu_sample_files[0].name.startswith("cpu.")


def test_live_collectives_match_across_all_ranks(gloo_warehouse):
    synced = sql_json(gloo_warehouse, "SELECT ranks, op_mismatch, match_method FROM collective_sync")
    assert len(synced) == 4 * 6 and all(c == {"ranks": GLOO_RANKS, "op_mismatch": False, "match_method": "pg_step_order"} for c in synced)
    steps = sql_json(gloo_warehouse, "SELECT straggler_rank, wait_share FROM step_sync")
    assert len(steps) == 4 and all(s["straggler_rank"] in RANKS and 0 <= s["wait_share"] <= 1 for s in steps)
    bw = sql_json(gloo_warehouse, "SELECT DISTINCT scope, link_gbps FROM collective_bw")
    assert bw == [{"scope": "intra", "link_gbps": 40.0}]


def test_sampled_counters_carry_the_collectives_traffic(gloo_warehouse):
    """Over loopback, the NIC counters must show at least what the collectives say they moved."""
    samples = sql_json(gloo_warehouse, "SELECT count(DISTINCT t_ns) AS n, count(DISTINCT interface) AS interfaces FROM net_samples WHERE interface = 'lo'")
    assert samples[0]["n"] > 10
    (totals,) = sql_json(
        gloo_warehouse,
        """
        SELECT
          (SELECT sum(tx_bytes) FROM net_utilization WHERE source = 'collectives') AS derived,
          (SELECT count(DISTINCT step) FROM steps) AS profiled_steps,
          (SELECT sum(tx_bytes) FROM net_utilization WHERE source = 'counters' AND interface = 'lo') AS counted
        """,
    )
    # The job ran 6 steps with the same traffic each, 4 of them profiled; the counters cover the
    # whole run, which adds DDP's initial broadcast of the parameters and TCP's headers.
    expected = totals["derived"] / totals["profiled_steps"] * 6
    assert totals["derived"] > 0 and 1.0 <= totals["counted"] / expected < 1.3, totals
    (lo,) = sql_json(gloo_warehouse, "SELECT * FROM network_summary WHERE source = 'counters' AND interface = 'lo'")
    assert lo["link_gbps"] == 25.0 and 0 < lo["mean_utilization"] <= lo["peak_utilization"] and lo["comm_windows"] > 0
    cpu = sql_json(gloo_warehouse, "SELECT count(DISTINCT cpu) AS cores FROM cpu_samples")
    assert cpu[0]["cores"] >= 2


TRAINING = """
import sys, warnings, torch
from collectors.capture import Capture

def train(capture):
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 2)
    optimiser = torch.optim.SGD(net.parameters(), lr=0.1)
    inputs, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for _ in range(4):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(net(inputs), labels).backward()
        optimiser.step()
        if capture:
            capture.step()
    return net.weight.detach().clone()

plain = train(None)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with Capture(run_dir=sys.argv[1], wait=0, warmup=1, active=2, sample_interval_s=0) as capture:
        profiled = train(capture)
print("same weights:", torch.equal(plain, profiled))
print("warned:", any("training continues" in str(w.message) for w in caught))
"""


@pytest.mark.parametrize("sabotage", ["export", "start"])
def test_a_failing_profiler_is_recorded_and_training_is_unchanged(tmp_path, sabotage):
    """A real torch job whose trace cannot be written trains exactly as without the profiler."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if sabotage == "export":  # a folder, not empty, where the trace's temporary file must go
        (run_dir / "traces" / ".rank0.pt.trace.json.partial.pt.trace.json" / "something").mkdir(parents=True)
    else:  # a file where the traces folder must go
        (run_dir / "traces").write_text("not a folder")
    result = subprocess.run([sys.executable, "-c", TRAINING, str(run_dir)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "same weights: True" in result.stdout and "warned: True" in result.stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [(f["stage"], f["rank"]) for f in manifest["failures"]] == [(sabotage, 0)]
    assert manifest["ranks"][0]["traces"] == [] and (run_dir / "_DONE").is_file()


def test_the_single_host_demo_answers_whole_and_keeps_the_jobs_output_in_its_run_folder(tmp_path):
    """Over loopback the demo assumes a line rate and says so; the job's chatter (Kineto's USDT
    lines) lands in the run folder, read as a log, never on the terminal."""
    result = wirespeed("demo", "--single-host", "--landing", str(tmp_path / "landing"), "--warehouse", str(tmp_path / "warehouse"))
    captured, _ = demo_answers(result)
    assert f"of the {10:g} Gbit/s line rate" in captured and "loopback has no line rate" in result.stdout
    (run_dir,) = (p for p in (tmp_path / "landing").iterdir() if p.name.startswith("demo-gloo-"))
    (output,) = (run_dir / "output").iterdir()
    assert "profiler_start" in output.read_text() and "profiler_start" not in result.stdout + result.stderr
