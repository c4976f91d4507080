"""The what-if model on cases computed by hand, the verdict's classes, and real runs."""

from __future__ import annotations

import json

import duckdb
import pytest

from conftest import ingest_directly, wirespeed
from pipelines.analysis import whatif
from pipelines.settings import Settings
from pipelines.warehouse import rollups
from pipelines.warehouse.store import Warehouse
from synthetic import Kernel, Rank, write_run

MIB = 1 << 20
ms = 1e-3


def buckets(found):
    return [(round(b.ready_s * 1000, 6), b.bytes) for b in found]


def test_horovod_fusion_closes_on_cycle_time_or_size():
    gradients = [whatif.Gradient(t * ms, size) for t, size in [(1, 4e6), (3, 4e6), (6, 8e6), (7, 70 * MIB), (8, 1e6)]]
    # 6 ms since backward began closes the first bucket; 70 MiB >= 64 MiB closes the second 1 ms
    # later; the last gradient is left over and goes at the end of backward.
    assert buckets(whatif.fuse_horovod(gradients)) == [(6, 16e6), (7, 70 * MIB), (8, 1e6)]
    # A 2 ms cycle closes at 3 and 6 ms; the 70 MiB gradient still closes its own bucket on size.
    assert buckets(whatif.fuse_horovod(gradients, cycle_s=2 * ms)) == [(3, 8e6), (6, 8e6), (7, 70 * MIB), (8, 1e6)]


def test_ddp_fusion_has_a_small_first_bucket():
    sizes = [0.5 * MIB, 0.6 * MIB, 10 * MIB, 10 * MIB, 10 * MIB, 5 * MIB]
    gradients = [whatif.Gradient((i + 1) * ms, int(s)) for i, s in enumerate(sizes)]
    assert buckets(whatif.fuse_ddp(gradients)) == [(2, int(1.1 * MIB)), (5, 30 * MIB), (6, 5 * MIB)]


def test_no_fusion_keeps_every_gradient():
    gradients = [whatif.Gradient(1 * ms, 10), whatif.Gradient(2 * ms, 20)]
    assert buckets(whatif.fuse_none(gradients)) == [(1, 10), (2, 20)]


def replay(bucket_list, compute_s, grid, reduce_cost=((0, 0.0), (1, 0.0))):
    with duckdb.connect() as con:
        return whatif.replay(con, whatif.Scenario(bucket_list, compute_s, max(grid.ranks), "hand"), grid, list(reduce_cost), "hand", "none")


def test_fifo_channel_and_no_overlap_bound():
    """Three 1.5 MB buckets ready at 0, 1 and 2 ms; N = 2 (factor 1); 8 Gbit/s: 1.5 ms each."""
    scenario = [whatif.Bucket(0, 1_500_000), whatif.Bucket(1 * ms, 1_500_000), whatif.Bucket(2 * ms, 1_500_000)]
    rows = replay(scenario, 10 * ms, whatif.Grid((2,), (8.0,), (1.0, 3.0)))
    plain, compressed = rows
    # e1 = 1.5, e2 = max(1, 1.5) + 1.5 = 3.0, e3 = max(2, 3.0) + 1.5 = 4.5; backward ends at 2 ms.
    assert plain["exposed_ms"] == pytest.approx(2.5) and plain["step_ms"] == pytest.approx(12.5)
    assert plain["scaling_factor"] == pytest.approx(10 / 12.5)
    # No overlap: all three start at 2 ms, so 4.5 ms are exposed.
    assert plain["no_overlap_scaling_factor"] == pytest.approx(10 / 14.5)
    # 3x compression: 0.5 ms each; e = 0.5, 1.5, 2.5.
    assert compressed["exposed_ms"] == pytest.approx(0.5) and compressed["scaling_factor"] == pytest.approx(10 / 10.5)


def test_least_compression_and_bandwidth_are_exact():
    scenario = [whatif.Bucket(0, 1_500_000), whatif.Bucket(1 * ms, 1_500_000), whatif.Bucket(2 * ms, 1_500_000)]
    grid = whatif.Grid((2,), (8.0,), (1.0,), (0.95,))
    (row,) = replay(scenario, 10 * ms, grid)
    # E_max = 10 (1/0.95 - 1) ms; the last bucket binds: 0.012 Gbit / (2 ms + E_max - 2 ms).
    least_product = 0.012 / (10 * ms * (1 / 0.95 - 1))
    assert row["min_bandwidth_gbps"]["0.95"] == pytest.approx(least_product)
    assert row["min_compression"]["0.95"] == pytest.approx(least_product / 8)
    # Replaying at exactly that compression lands exactly on the target.
    (check,) = replay(scenario, 10 * ms, whatif.Grid((2,), (8.0,), (least_product / 8,)))
    assert check["scaling_factor"] == pytest.approx(0.95)
    # Where the least product is below the line rate, no compression is needed.
    (fast,) = replay(scenario, 10 * ms, whatif.Grid((2,), (100.0,), (1.0,), (0.95,)))
    assert fast["min_compression"]["0.95"] == 1.0


def test_unreachable_targets():
    """Adding the bytes on the device alone takes longer than the step's budget for exposure."""
    slow_adds = ((0, 1 * ms), (10**9, 1 * ms))  # a(x) = 1 ms whatever x
    (row,) = replay([whatif.Bucket(0, 1_000_000)], 10 * ms, whatif.Grid((3,), (100.0,), (1.0,), (0.95,)), slow_adds)
    # (N - 1) a(S/N) = 2 ms > E_max = 0.53 ms, with backward over at once.
    assert row["min_compression"]["0.95"] is None and row["min_bandwidth_gbps"]["0.95"] is None


def test_reduce_cost_interpolation():
    """a(x): linear between points, flat below the first, the last slope beyond the last."""
    table = ((100, 2e-6), (200, 6e-6), (400, 10e-6))
    cases = {50: 2e-6, 150: 4e-6, 300: 8e-6, 600: 14e-6}
    for chunk, expected in cases.items():
        # N = 2 halves the bucket; a near-infinite line rate leaves only (N - 1) a(S/N).
        (row,) = replay([whatif.Bucket(0, 2 * chunk)], 1.0, whatif.Grid((2,), (1e12,), (1.0,)), table)
        assert row["exposed_ms"] == pytest.approx(expected * 1000, rel=1e-6), chunk


def test_default_reduce_cost_is_the_papers_v100_table():
    assert whatif.DEFAULT_REDUCE_COST[1:] == ((1_300_000, 10e-6), (10_000_000, 48e-6), (671_000_000, 2.4e-3))


def test_timeline_cli(tmp_path):
    timeline = tmp_path / "grads.csv"
    timeline.write_text("ready_us,bytes\n1000,4000000\n3000,4000000\n6000,8000000\n")
    out = wirespeed("whatif", "--timeline", str(timeline), "--compute-ms", "20", "--ranks", "16", "--bandwidth", "10",
                    "--compression", "1", "--format", "json", "--warehouse", str(tmp_path / "w"))
    (row,) = json.loads(out.stdout)
    # Horovod closes one 16 MB bucket at 6 ms; 2(15/16) 8 x 16e6 bits at 10 Gbit/s = 24 ms, plus 15 adds of 1 MB.
    assert row["buckets"] == 1 and row["exposed_ms"] == pytest.approx(24.15)
    assert row["scaling_factor"] == pytest.approx(20 / 44.15)
    assert {"ranks", "bandwidth_gbps", "compression", "exposed_ms", "step_ms", "scaling_factor"} <= set(row)
    bad = wirespeed("whatif", "--timeline", str(timeline), "--warehouse", str(tmp_path / "w"), check=False)
    assert bad.returncode == 2 and "--compute-ms" in bad.stderr


def test_timeline_errors_name_file_and_line(tmp_path):
    timeline = tmp_path / "bad.csv"
    timeline.write_text("ready_us,bytes\n10,100\nsoon,5\n")
    with pytest.raises(ValueError, match=r"bad.csv:3"):
        whatif.read_timeline(timeline)


# --- the verdict's classes, on two-rank runs built for each --------------------------------------


def class_run(tmp_path, link_gbps, comm_us, late_rank_us=0.0, bytes_=10_000_000):
    """Backward computes for 10 ms, then one gradient all-reduce runs alone (fully exposed).

    With `late_rank_us`, rank 1 computes that much longer and arrives late; rank 0 waits for it.
    """
    ranks = []
    for rank in (0, 1):
        late = late_rank_us if rank == 1 else 0.0
        compute_end = 10_200 + late
        ranks.append(Rank(rank, f"host-{rank}", [(1, 0, 60_000)], [
            Kernel(200, 10_000 + late, launch_us=150),
            Kernel(compute_end, comm_us - late, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce",
                   bytes_ // 4, seq=1, stream=40, launch_us=5_000),
        ], cpu_ops=[("autograd::engine::evaluate_function: AddmmBackward0", 100, 9_000)]))
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, write_run(tmp_path / "run", ranks, 2), "r", overrides={"link_gbps": link_gbps})
    con = rollups.session(store, Settings())
    rollups.recompute(con)
    (verdict,) = con.sql("SELECT * FROM verdict").fetchall()
    columns = con.sql("SELECT * FROM verdict").columns
    con.close()
    return dict(zip(columns, verdict, strict=True))


def test_transport_bound(tmp_path):
    """10 MB in 10 ms over an 800 Gbit/s link: 1% utilisation; at line rate it would take 0.1 ms."""
    verdict = class_run(tmp_path, 800, 10_000)
    assert verdict["bottleneck"] == "transport-bound"
    assert verdict["exposed_comm_share"] == pytest.approx(0.5)
    assert verdict["utilization"] == pytest.approx(8e7 / 1e7 / 800)
    assert verdict["full_rate_sf"] > 0.98 and "transport" in verdict["explanation"]


def test_bandwidth_bound(tmp_path):
    """The same bytes over 1 Gbit/s take 80 ms even at line rate: SF about 0.11."""
    verdict = class_run(tmp_path, 1, 80_000)
    assert verdict["bottleneck"] == "bandwidth-bound"
    assert verdict["utilization"] == pytest.approx(1.0)
    assert verdict["full_rate_sf"] < 0.2 and verdict["min_compression_95"] > 50


def test_straggler_bound(tmp_path):
    """Rank 1 computes 9 ms longer; rank 0 waits 9 of its 10 ms of exposed communication."""
    verdict = class_run(tmp_path, 800, 10_000, late_rank_us=9_000)
    assert verdict["bottleneck"] == "straggler-bound" and verdict["wait_share"] == pytest.approx(9 / 11)


def test_not_communication_bound(tmp_path):
    verdict = class_run(tmp_path, 800, 100)
    assert verdict["bottleneck"] == "not communication-bound"


def test_unknown_line_rate(tmp_path):
    verdict = class_run(tmp_path, None, 10_000)
    assert verdict["bottleneck"] == "communication-bound (line rate unknown)" and verdict["full_rate_sf"] is None


def test_the_scaling_factor_now_and_at_full_line_rate_are_measured_alike(tmp_path):
    """Transfers already at the line rate (10 MB all-reduced in 80 ms over 1 Gbit/s) cannot scale
    better now than at full line rate. The last step also runs 200 ms of other work (a profiler's
    teardown does): 1 - the exposed share over all steps said 0.51 now against 0.20 at full line
    rate; both are now the median over rank-steps of the step without its exposed communication,
    over the median step."""
    ranks = []
    for rank in (0, 1):
        kernels = []
        for step, base in ((1, 0), (2, 100_000), (3, 200_000)):
            kernels += [Kernel(base + 200, 10_000, launch_us=base + 150),
                        Kernel(base + 10_200, 80_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce",
                               2_500_000, seq=step, stream=40, launch_us=base + 5_000)]
        kernels.append(Kernel(290_300, 200_000, launch_us=206_000))
        ranks.append(Rank(rank, f"host-{rank}", [(1, 0, 100_000), (2, 100_000, 100_000), (3, 200_000, 300_000)], kernels))
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, write_run(tmp_path / "run", ranks, 2), "r", overrides={"link_gbps": 1})
    con = rollups.session(store, Settings())
    rollups.recompute(con)
    estimated, full_rate = con.sql("SELECT estimated_sf, full_rate_sf FROM verdict").fetchall()[0]
    con.close()
    assert estimated == pytest.approx((100 - 80) / 100)  # steps of 100 ms, 80 of them exposed
    assert estimated == pytest.approx(full_rate, abs=0.01)


def test_a_bucket_is_ready_when_the_compute_launched_before_its_collective_has_ended(tmp_path):
    """A gradient bucket is ready at the latest end of the compute kernels launched before its
    all-reduce, however long ago, and never of one launched after it, however soon. The launches
    1 us apart fall in one of the lookup's time buckets, the others in earlier ones."""
    def kernels(step_us: float) -> list[Kernel]:
        at = step_us
        return [
            Kernel(at + 5_200, 1_000, launch_us=at + 5_100),  # backward's first kernel
            Kernel(at + 10_100, 20_000, launch_us=at + 10_000),  # long ago, ends at 30.1 ms
            Kernel(at + 20_000, 15_000, stream=8, launch_us=at + 19_999),  # 1 us before: ends at 35 ms
            Kernel(at + 36_000, 2_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 1_000_000,
                   stream=40, launch_us=at + 20_000),
            Kernel(at + 20_002, 40_000, stream=9, launch_us=at + 20_001),  # 1 us after: ends at 60.002 ms
            Kernel(at + 62_000, 2_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 1_000_000,
                   stream=40, launch_us=at + 50_000),
            Kernel(at + 50_002, 45_000, stream=10, launch_us=at + 50_001),  # 1 us after the second
        ]

    ranks = [Rank(rank, f"host-{rank}", [(1, 0, 100_000), (2, 100_000, 100_000)], kernels(0) + kernels(100_000),
                  cpu_ops=[("autograd::engine::evaluate_function: MmBackward0", at + 5_000, 80_000) for at in (0, 100_000)])
             for rank in (0, 1)]
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, write_run(tmp_path / "run", ranks, 2), "r", overrides={"link_gbps": 1})
    con = store.connect()
    try:
        ready = con.execute("SELECT DISTINCT step, bucket, ready_ns FROM gradient_buckets ORDER BY step, bucket").fetchall()
    finally:
        con.close()
    # From backward's first kernel at 5.2 ms: ready at 35 ms, then at 60.002 ms.
    assert ready == [(step, bucket, ns) for step in (1, 2) for bucket, ns in ((1, 29_800_000), (2, 54_802_000))]


# --- real runs ------------------------------------------------------------------------------------


def test_real_trace_buckets_and_grid(shared_warehouse):
    con = shared_warehouse.connect()
    try:
        buckets = con.execute(
            "SELECT step, count(*), sum(bytes), max(ready_ns) = any_value(backward_ns) FROM gradient_buckets "
            "WHERE run_id = 'nccl_data' GROUP BY step ORDER BY step"
        ).fetchall()
        # DDP's five gradient buckets in each of the three steps, 102 MB in all; the last ends backward.
        assert buckets == [(4, 5, 102_228_128, True), (5, 5, 102_228_128, True), (6, 5, 102_228_128, True)]
        grid = con.execute(
            "SELECT ranks, bandwidth_gbps, compression, scaling_factor, no_overlap_scaling_factor FROM whatif "
            "WHERE run_id = 'nccl_data' AND model = 'paper' ORDER BY ranks, compression, bandwidth_gbps"
        ).fetchall()
    finally:
        con.close()
    assert {r[0] for r in grid} == {2, 16, 128} and len(grid) == 3 * 7 * 4
    for (n1, _, c1, sf1, bound1), (n2, _, c2, sf2, _) in zip(grid, grid[1:], strict=False):
        if (n1, c1) == (n2, c2):
            assert sf2 >= sf1  # more bandwidth never hurts
        assert bound1 <= sf1 + 1e-12  # overlap never hurts


def test_run_cli_replays_observed_buckets(shared_warehouse):
    out = wirespeed("whatif", "nccl_data", "--warehouse", str(shared_warehouse.root), "--model", "paper", "--ranks", "2",
                    "--bandwidth", "100", "--compression", "1", "--format", "json")
    (row,) = json.loads(out.stdout)
    assert row["fusion"] == "observed" and row["buckets"] == 5 and 0.99 < row["scaling_factor"] < 1
    fused = json.loads(wirespeed("whatif", "nccl_data", "--warehouse", str(shared_warehouse.root), "--model", "paper", "--ranks", "2",
                                 "--bandwidth", "100", "--compression", "1", "--fusion", "horovod", "--cycle-ms", "1000",
                                 "--fusion-mib", "1024", "--format", "json").stdout)
    # A 1000 ms cycle and a 1 GiB buffer never close within backward: one bucket, at its end.
    assert fused[0]["buckets"] == 1 and fused[0]["scaling_factor"] < row["scaling_factor"]


def test_whatif_refuses_the_other_models_options(shared_warehouse):
    warehouse = ("--warehouse", str(shared_warehouse.root))
    replayed = wirespeed("whatif", "nccl_data", *warehouse, "--fusion", "horovod", check=False)
    assert replayed.returncode != 0 and "--fusion: the paper's model's options; add --model paper" in replayed.stderr
    paper = wirespeed("whatif", "nccl_data", *warehouse, "--model", "paper", "--at-line-rate", check=False)
    assert paper.returncode != 0 and "--at-line-rate is the replay's" in paper.stderr
    (row,) = json.loads(wirespeed("whatif", "nccl_data", *warehouse, "--ranks", "2", "--bandwidth", "100",
                                  "--compression", "1", "--format", "json").stdout)
    assert row["model"] == "replay" and row["transfers"] == "achieved" and row["exposed_ms_by_dimension"]


def test_live_gloo_run_whatif_and_verdict(gloo_run, tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, gloo_run)
    buckets = "SELECT max(bucket), any_value(ranks) FROM gradient_buckets WHERE run_id = 'gloo-live'"
    con = rollups.session(store, Settings(), queries=[buckets])
    rollups.recompute(con)
    (bottleneck, full_rate_sf, link) = con.execute("SELECT bottleneck, full_rate_sf, link_gbps FROM verdict").fetchall()[0]
    n_buckets, ranks = con.execute(buckets).fetchall()[0]
    con.close()
    # DDP's buckets of the six-layer model, all-reduced among 4 ranks on one host (40 Gbit/s given).
    assert n_buckets >= 3 and ranks == 4 and link == 40.0 and 0 < full_rate_sf <= 1
    assert bottleneck in {"transport-bound", "straggler-bound", "mixed", "bandwidth-bound", "not communication-bound"}


def test_scaling_against_the_jobs_baseline(tmp_path):
    """One device steps in 10 ms; two ranks in 12.5 ms with 19% more compute: SF 0.8, inflation flagged."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    single = write_run(tmp_path / "one", [Rank(0, "host-a", [(1, 0, 20_000)], [Kernel(0, 10_000, launch_us=0)])], 1)
    pair = write_run(tmp_path / "two", [
        Rank(r, f"host-{r}", [(1, 0, 20_000)], [
            Kernel(0, 11_900, launch_us=0),
            Kernel(11_900, 600, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 1000, seq=1, stream=40, launch_us=1),
        ]) for r in (0, 1)
    ], 2)
    for folder, world in ((single, 1), (pair, 2)):
        (folder / "traces").mkdir()
        for trace in folder.glob("rank*.json"):
            trace.rename(folder / "traces" / trace.name)
        (folder / "manifest.json").write_text(json.dumps({"run_id": folder.name, "world_size": world, "tags": {"job": "resnet"}}))
        ingest_directly(store, folder)
    con = rollups.session(store, Settings())
    rollups.recompute(con)
    rows = con.execute(
        "SELECT run_id, job, baseline_run_id, baseline_kind, measured_sf, compute_inflation, compute_inflated FROM scaling ORDER BY run_id"
    ).fetchall()
    (measured,) = con.execute("SELECT measured_sf FROM verdict WHERE run_id = 'two'").fetchall()[0]
    con.close()
    one, two = rows
    assert one == ("one", "resnet", "one", "device", 1.0, 0.0, False)
    assert two[:4] == ("two", "resnet", "one", "device")
    assert two[4] == pytest.approx(10 / 12.5) and two[5] == pytest.approx(0.19) and two[6] is True
    assert measured == pytest.approx(0.8)


def test_runs_of_one_size_have_no_scaling_factor_against_each_other(tmp_path):
    """Two 2-rank runs of a job (say at two line rates, 12.5 and 25 ms a step) have nothing to scale
    against: the faster against the slower would read SF 2. A 4-rank run of the job scales against
    the latest of them."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()

    def run(name: str, world: int, compute_us: int, comm_us: int):
        ranks = [Rank(r, f"host-{r}", [(1, 0, 30_000)], [
            Kernel(0, compute_us, launch_us=0),
            Kernel(compute_us, comm_us, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 1000, seq=1, stream=40, launch_us=1),
        ]) for r in range(world)]
        folder = write_run(tmp_path / name, ranks, world)
        (folder / "traces").mkdir()
        for trace in folder.glob("rank*.json"):
            trace.rename(folder / "traces" / trace.name)
        (folder / "manifest.json").write_text(json.dumps({"run_id": name, "world_size": world, "tags": {"job": "bert"}}))
        ingest_directly(store, folder)

    run("slow-link", 2, 10_000, 15_000)
    run("fast-link", 2, 10_000, 2_500)
    run("four", 4, 10_000, 5_000)
    con = rollups.session(store, Settings())
    rollups.recompute(con)
    rows = {row[0]: row[1:] for row in con.execute(
        "SELECT run_id, baseline_run_id, measured_sf, compute_inflation FROM scaling").fetchall()}
    verdict = dict(con.execute("SELECT run_id, measured_sf FROM verdict").fetchall())
    con.close()
    assert rows["slow-link"][1] is None and rows["fast-link"][1] is None, rows
    (baseline,) = {row[0] for row in rows.values()}
    assert baseline == "fast-link"  # the latest of the fewest ranks
    assert rows["fast-link"][2] == 0.0 and rows["slow-link"][2] is None
    assert rows["four"][1] == pytest.approx(12.5 / 15) and rows["four"][2] == pytest.approx(0.0)
    assert verdict == {"slow-link": None, "fast-link": None, "four": pytest.approx(12.5 / 15)}
