"""`wirespeed compare`: the parts of the step add up to its change, and name what really changed."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from conftest import REPO, TRACES, ingest_directly, wirespeed
from pipelines.commands.compare import compare
from pipelines.settings import Settings
from pipelines.warehouse import rollups
from pipelines.warehouse.store import Warehouse


def assert_parts_add_up(result: dict) -> None:
    step = result["step_ms"]
    assert sum(part["a_ms"] for part in result["parts"]) == pytest.approx(step["a"], rel=1e-9)
    assert sum(part["b_ms"] for part in result["parts"]) == pytest.approx(step["b"], rel=1e-9)
    assert sum(part["delta_ms"] for part in result["parts"]) == pytest.approx(step["delta"], rel=0.01, abs=1e-9)


def test_the_parts_of_two_real_runs_add_up_and_what_differs_is_said(store):
    """An A100 NCCL run against a two-rank run of other hardware: the parts add up exactly, and
    the notes say what the comparison cannot see past."""
    nccl = ingest_directly(store, TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz")
    sampled = ingest_directly(store, TRACES / "hta_sampled_2rank", "sampled_2rank")
    result = compare(store, Settings(), nccl, sampled)
    assert_parts_add_up(result)
    assert [part["part"] for part in result["parts"]][0] == "compute" and result["parts"][-1]["part"] == "idle"
    assert any("differ in size" in note for note in result["notes"])
    itself = compare(store, Settings(), nccl, nccl)
    assert itself["step_ms"]["delta"] == 0 and all(part["delta_ms"] == 0 for part in itself["parts"])
    with pytest.raises(LookupError, match="not in the warehouse"):
        compare(store, Settings(), nccl, "no-such-run")
    # Read as far as its first line (`wirespeed compare A B | head -1`), it stops without a traceback.
    piped = subprocess.run(f"{sys.executable} -m pipelines.commands.cli compare {nccl} {sampled} --warehouse {store.root} | head -1",
                           shell=True, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert piped.stdout.count("\n") == 1 and "Traceback" not in piped.stderr and piped.stderr == ""


def test_a_run_and_its_twin_on_a_slower_link_differ_in_exposed_communication(cluster_runs, store):
    """DDP on two emulated hosts at 1000 and at 200 Mbit/s, back to back: the step grew because
    its data-parallel communication over the network was exposed longer, and the parts add up to
    the change within 1 %; the JSON of the command line says the same."""
    cost = cluster_runs("ddp")
    largest, grown = [], []
    for pair in cost.pairs:
        fast, slow = (ingest_directly(store, run.run_dir) for run in (pair.fast, pair.slow))
        result = compare(store, Settings(), fast, slow)
        assert_parts_add_up(result)
        parts = {part["part"]: part["delta_ms"] for part in result["parts"]}
        print(f"{fast} -> {slow}: step {result['step_ms']['delta']:+.1f} ms; " + ", ".join(f"{k} {v:+.1f}" for k, v in parts.items()))
        largest.append(result["largest_change"])
        grown.append(parts.get("exposed communication: dp (network)", 0) / result["step_ms"]["delta"])
    assert statistics.mode(largest) == "exposed communication: dp (network)", largest
    assert statistics.median(grown) > 0.5, grown
    out = json.loads(wirespeed("compare", fast, slow, "--warehouse", str(store.root), "--format", "json").stdout)
    assert set(out) >= {"step_ms", "parts", "collectives", "ranks"} and set(out["step_ms"]) == {"a", "b", "delta"}
    assert out["collectives"][0]["op"] == "allreduce" and out["collectives"][0]["delta_ms_per_step"] > 0
    assert "1 Gbit/s and 0.2 Gbit/s" in " ".join(out["notes"])
    table = wirespeed("compare", fast, slow, "--warehouse", str(store.root)).stdout
    assert f"largest change: {result['largest_change']}" in table


STRAGGLER_MS = 300
HOSTS = 4
REPEAT_AGREEMENT = 0.05  # a repeat: two runs whose median steps, by the job's own clock, differ by at most this


def closest_two(runs: list) -> tuple:
    """The two runs, in the order they ran, whose median steps by the job's own clock agree best,
    and how far apart they are (relative). Other work on the machine slows some runs by 15 % and
    more, and a run it slowed that much did regress: a repeat is two runs it left alike."""
    pairs = [(abs(a.median_step_ns / b.median_step_ns - 1), a, b) for i, a in enumerate(runs) for b in runs[i + 1:]]
    apart, first, second = min(pairs, key=lambda pair: pair[0])
    return first, second, apart


def a_repeat(runs: list, run_again, most: int) -> tuple:
    """`closest_two` of `runs` and of runs of `run_again()`, run (up to `most` runs in all) while no
    two agree within REPEAT_AGREEMENT: on a busy hour the first runs may hold no repeat at all."""
    runs = list(runs)
    while len(runs) < 2 or (closest_two(runs)[2] > REPEAT_AGREEMENT and len(runs) < most):
        runs.append(run_again())
    print(f"median steps {[round(run.median_step_ns / 1e6) for run in runs]} ms")
    return closest_two(runs)


@pytest.fixture(scope="module")
def straggler_runs(tmp_path_factory, store):
    """DDP on four emulated hosts at 1000 Mbit/s: as it is until two runs agree (at most four
    runs), then with its last rank waiting 300 ms in each step for its input (a slow data loader)."""
    from conftest import require_cluster
    from pipelines.testbed.cluster import run_job

    require_cluster()
    landing = tmp_path_factory.mktemp("straggler-landing")
    base, repeat, apart = a_repeat([], lambda: run_job("ddp", 1000, landing, hosts=HOSTS), most=4)
    print(f"as it is: a repeat {apart:.1%} apart")
    straggler = run_job("ddp", 1000, landing, hosts=HOSTS, job_args=("--straggler-ms", str(STRAGGLER_MS)))
    return [ingest_directly(store, run.run_dir) for run in (base, repeat, straggler)]


def test_a_straggler_twin_differs_in_waiting_for_other_ranks(straggler_runs, store):
    """Three ranks of four wait for the one whose input is late: the wait is the part that grew
    (the late rank's own part is idle), and the parts add up."""
    base, _, straggler = straggler_runs
    result = compare(store, Settings(), base, straggler)
    assert_parts_add_up(result)
    parts = {part["part"]: part["delta_ms"] for part in result["parts"]}
    print(f"{base} -> {straggler}: step {result['step_ms']['delta']:+.1f} ms; " + ", ".join(f"{k} {v:+.1f}" for k, v in parts.items()))
    assert result["largest_change"] == "waiting for other ranks"
    # At most three quarters of the delay (the mean over ranks), less what the waiting ranks hid
    # under their own backward.
    assert STRAGGLER_MS / 4 < parts["waiting for other ranks"] < (HOSTS - 1) / HOSTS * STRAGGLER_MS * 1.1
    # The straggler itself waited no longer: its exposed communication grew least.
    assert min(result["ranks"], key=lambda rank: rank["delta_exposed_ms"])["rank"] == HOSTS - 1


# --- regressions against a job's baseline ---------------------------------------------------------


def regressed(store: Warehouse, run_id: str) -> dict[str, bool]:
    """Each measure of `run_id` compared with its baseline (bus bandwidth per kind), and whether it regressed."""
    rollups.publish(store, Settings())
    con = store.connect()
    try:
        rows = con.execute("SELECT metric, kind, regressed, summary FROM regressions WHERE run_id = $run", {"run": run_id}).fetchall()
    finally:
        con.close()
    for metric, kind, fired, summary in rows:
        print(f"{run_id}: {'REGRESSED' if fired else 'ok'}: {summary}")
    return {f"{metric} {kind}".strip(): fired for metric, kind, fired, _ in rows}


def test_the_regression_check_fires_on_a_straggler_and_not_on_a_repeat(straggler_runs, store):
    base, repeat, straggler = straggler_runs
    assert not any(regressed(store, base).values())  # the first run of its size has no baseline
    assert regressed(store, repeat) and not any(regressed(store, repeat).values())
    found = regressed(store, straggler)
    assert found["step time"] and found["waiting share"], found


def test_the_regression_check_fires_on_a_slower_link_and_not_on_a_repeat(cluster_runs, tmp_path):
    """DDP at 1000 Mbit/s, then again at 1000 (a repeat: quiet), or at 1000 and then at 200 (step
    time, exposed share and the all-reduces' bus bandwidth regressed). Each comparison in a
    warehouse of its own."""
    from pipelines.testbed.cluster import run_job

    cost = cluster_runs("ddp")
    first_fast, later_fast, apart = a_repeat([pair.fast for pair in cost.pairs],
                                             lambda: run_job("ddp", cost.fast_mbit, tmp_path / "landing"), most=5)
    print(f"a repeat at {cost.fast_mbit:g} Mbit/s: {apart:.1%} apart")
    for name, earlier, later, fires in (("repeat", first_fast, later_fast, False),
                                        ("slower", cost.pairs[0].fast, cost.pairs[1].slow, True)):
        store = Warehouse(tmp_path / name)
        store.ensure()
        ingest_directly(store, earlier.run_dir)
        found = regressed(store, ingest_directly(store, later.run_dir))
        if fires:
            assert found["step time"] and found["exposed share"], found
            assert any(fired for measure, fired in found.items() if measure.startswith("bus bandwidth allreduce")), found
        else:
            assert found and not any(found.values()), found


def test_regression_thresholds_and_severity_come_from_the_warehouse_settings(tmp_path):
    from pipelines import settings

    (tmp_path / "wirespeed.toml").write_text('[regressions]\nstep_change_min = 0.2\nbaseline_runs = 3\nseverity = "error"\n')
    loaded = settings.load(tmp_path)
    assert loaded.regressions["step_change_min"] == 0.2 and loaded.regressions["baseline_runs"] == 3
    assert loaded.regression_severity == "error"
    (tmp_path / "wirespeed.toml").write_text('[regressions]\nseverity = "page me"\n')
    with pytest.raises(ValueError, match="severity"):
        settings.load(tmp_path)
    (tmp_path / "wirespeed.toml").write_text("[regressions]\nstep_change = 0.2\n")
    with pytest.raises(ValueError, match="step_change"):
        settings.load(tmp_path)
