"""The replay what-if: small cases worked by hand, and real jobs on the emulated cluster."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from conftest import ingest_directly, table_rows, wirespeed
from pipelines.analysis.replay import Cell, Model, Replay, Scenario, busbw_factors
from pipelines.warehouse import sql
from pipelines.warehouse.store import Warehouse
from synthetic import BASE_NS, GlooCall, GlooRank, Kernel, Rank, ns, write_gloo_run, write_nccl_logs, write_run

MS = 1_000_000


def inputs(rows: list[dict]) -> pa.Table:
    """whatif_inputs rows, times in ms; what a case leaves out takes a default."""
    defaults = {"op": "allreduce", "pg": "0", "dimension": "tp", "scope": "inter", "group_size": 2, "bytes": 1,
                "traffic_factor": 1.0, "link_gbps": 1.0, "rest_ns": 0, "tied": True, "waited_ns": 0, "slack_ns": None,
                "way": "both", "turn": None, "rooted": False, "beyond_link_ns": 0}
    full = [{**defaults, **row} for row in rows]
    for row in full:
        row.setdefault("channel", f"rank {row['rank']}")
        for name in ("start_ns", "end_ns", "begin_ns", "collective_end_ns", "transfer_ns", "waited_ns", "rest_ns",
                     "beyond_link_ns"):
            row[name] = int(row[name] * MS)
        row["wire_ns"] = row["transfer_ns"]
        row["latency_ns"] = row["rest_ns"]
        row["bits"] = float(row["transfer_ns"])  # at 1 Gbit/s, a bit a nanosecond
        if row["link_gbps"] is None:
            row["wire_ns"] = 0
    return pa.Table.from_pylist(full)


@pytest.fixture(scope="module")
def factors():
    """The bus-bandwidth factors, from the macros of a session of their own."""
    con = sql.session()
    sql.use_macros(con)
    yield busbw_factors(con)
    con.close()


def steps(step_ms: float, exposed_ms: float, ranks: int = 2) -> pa.Table:
    return pa.table({"rank": list(range(ranks)), "step": [1] * ranks, "window_start_ns": [0] * ranks,
                     "window_end_ns": [int(step_ms * MS)] * ranks, "step_ns": [int(step_ms * MS)] * ranks,
                     "compute_ns": [int((step_ms - exposed_ms) * MS)] * ranks})


def one_wait(factors) -> Replay:
    """Two ranks arrive at 40 ms for a 20 ms all-reduce (1 Gbit/s) and wait for it; steps of 100 ms."""
    row = {"step": 1, "collective_key": "a", "start_ns": 40, "end_ns": 60, "begin_ns": 40, "collective_end_ns": 60,
           "transfer_ns": 20, "waited_ns": 20}
    return Replay(inputs([{**row, "rank": 0}, {**row, "rank": 1}]), steps(100, 20), factors)


def test_a_wait_moves_with_its_collective(factors):
    replay = one_wait(factors)
    step_ns, exposure = replay.run([
        Scenario(1.0), Scenario(2.0), Scenario(0.5),
        Scenario(1.0, compression=(("tp", 4.0),)), Scenario(1.0, compression=(("dp", 4.0),)),
    ], np.arange(replay.count))  # each row a group of its own
    assert (step_ns[0] / MS).tolist() == [100, 90, 120, 85, 100]
    assert (exposure[0] / MS).tolist() == [20, 10, 40, 5, 20]


def test_a_link_of_unknown_rate_stays_as_measured_unless_transfers_are_at_full_line_rate(factors):
    """The run does not know its link's rate, so how much of it a transfer achieved is unknown too;
    at full line rate B, the 20 Mbit the all-reduce sends take 20 Mbit / B whatever the link."""
    row = {"step": 1, "collective_key": "a", "start_ns": 40, "end_ns": 60, "begin_ns": 40, "collective_end_ns": 60,
           "transfer_ns": 20, "waited_ns": 20, "link_gbps": None}
    replay = Replay(inputs([{**row, "rank": 0}, {**row, "rank": 1}]), steps(100, 20), factors)
    step_ns, _ = replay.run([Scenario(2.0), Scenario(2.0, line_rate=True), Scenario(0.5, line_rate=True)])
    assert (step_ns[0] / MS).tolist() == [100, 90, 120]


def test_searches_per_dimension_and_link(factors):
    """t_1 = 80 ms and SF(B, c) = 80 / (80 + 20 / (B c)): SF 0.9 needs B c = 2.25."""
    model = Model(one_wait(factors), 2)
    rows = {(r["dimension"], r["target"]): r for r in model.targets([Cell(2, 1.0, 1.0)], (0.9,))}
    assert rows["all", 0.9]["min_compression"] == pytest.approx(2.25, rel=1e-4)
    assert rows["tp", 0.9]["min_compression"] == pytest.approx(2.25, rel=1e-4)
    assert rows["all", 0.9]["min_bandwidth_gbps"] == pytest.approx(2.25, rel=1e-4)
    assert rows["all", 0.9]["min_intra_gbps"] is None  # nothing crosses an intra-host link
    (cells, parts) = model.cells([Cell(2, 2.25, 1.0), Cell(16, 1.0, 1.0)])
    assert cells[0]["scaling_factor"] == pytest.approx(0.9)
    # Tensor parallelism does not grow with more ranks: the same step at 16.
    assert cells[1]["step_ns"] == 100 * MS
    exposed = {p["dimension"]: p["exposed_ns"] for p in parts[:2]}
    assert exposed == {"tp": pytest.approx(20 * MS / 2.25, abs=1), "fixed": 0}


class Counted(Model):
    """The replay's model, counting the replays its searches ask for."""

    def __init__(self, replay: Replay, world_size: int):
        super().__init__(replay, world_size)
        self.replays = 0

    def scaling(self, scenarios):
        self.replays += 1
        return super().scaling(scenarios)


def test_a_search_finds_the_least_rate_that_reaches_its_target_past_a_bend(factors):
    """Two ranks wait for all-reduce a (20-40 ms), then compute to 100 ms while b (50-65 ms) runs,
    needed only by the step's end (35 ms of slack): t_1 = 80 ms. At scale s = 1/B the step is
    100 + max(20 s - 20, 35 s - 70), bent at B = 0.3. SF 0.9 needs B = 20 / (20 - 11.1) = 2.25,
    above the bend; SF 0.2 needs 35 s - 70 = 300, B = 35 / 370, below it. Each rate found reaches
    its target and one a hundredth of a percent lower does not; a target reached at the range's low
    end gives that end, one that no rate reaches gives None."""
    rows = []
    for rank in (0, 1):
        rows.append({"rank": rank, "step": 1, "collective_key": "a", "start_ns": 20, "end_ns": 40, "begin_ns": 20,
                     "collective_end_ns": 40, "transfer_ns": 20, "waited_ns": 20})
        rows.append({"rank": rank, "step": 1, "collective_key": "b", "start_ns": 50, "end_ns": 65, "begin_ns": 50,
                     "collective_end_ns": 65, "transfer_ns": 15, "slack_ns": 35 * MS})
    model = Counted(Replay(inputs(rows), steps(100, 20), factors), 2)
    targets = (0.9, 0.2, 0.5, 1.01)
    found = model.least([(lambda x: Scenario(x), target, (1.0 if target == 0.5 else 1e-3, 1e7)) for target in targets])
    assert model.replays <= 11  # the ends, then at most ten passes, each narrowing the range fourfold
    assert found[0] == pytest.approx(2.25, rel=1e-4) and found[1] == pytest.approx(35 / 370, rel=1e-4)
    for rate, target in zip(found[:2], targets):
        assert model.scaling([Scenario(rate)])[0] >= target > model.scaling([Scenario(rate * (1 - 1e-4))])[0]
    assert found[2:] == [1.0, None]


def test_searches_compress_one_dimension_and_speed_up_one_link(factors):
    """A 20 ms tensor-parallel all-reduce inside the host (100 Gbit/s), then a 20 ms data-parallel
    one over the network (1 Gbit/s), both waited for: t_1 = 60 ms of a 100 ms step. SF 0.7 needs
    the exposed 40 ms down to 25.71: compressing everything 40 / 25.71 = 1.556 times, the dp
    traffic alone 20 / 5.71 = 3.5 times; or the host's link at 100 * 20 / 5.71 = 350 Gbit/s."""
    rows = []
    for rank in (0, 1):
        rows.append({"rank": rank, "step": 1, "collective_key": "tp", "start_ns": 30, "end_ns": 50, "begin_ns": 30,
                     "collective_end_ns": 50, "transfer_ns": 20, "waited_ns": 20, "scope": "intra", "link_gbps": 100.0})
        rows.append({"rank": rank, "step": 1, "collective_key": "dp", "dimension": "dp", "start_ns": 70, "end_ns": 90,
                     "begin_ns": 70, "collective_end_ns": 90, "transfer_ns": 20, "waited_ns": 20})
    model = Model(Replay(inputs(rows), steps(100, 40), factors), 2)
    found = {(r["dimension"]): r for r in model.targets([Cell(2, 1.0, 1.0)], (0.7,))}
    assert found["all"]["min_compression"] == pytest.approx(40 / (60 / 0.7 - 60), rel=1e-4)
    assert found["dp"]["min_compression"] == pytest.approx(20 / (60 / 0.7 - 80), rel=1e-4)
    assert found["tp"]["min_compression"] == pytest.approx(20 / (60 / 0.7 - 80), rel=1e-4)
    assert found["all"]["min_intra_gbps"] == pytest.approx(100 * 20 / (60 / 0.7 - 80), rel=1e-4)
    assert found["all"]["min_bandwidth_gbps"] == pytest.approx(20 / (60 / 0.7 - 80), rel=1e-4)
    # SF 0.75 needs the exposure at 20 ms: only both dimensions together can reach it.
    reach = {r["dimension"]: r["reachable"] for r in model.targets([Cell(2, 1.0, 1.0)], (0.75,))}
    assert reach == {"all": True, "dp": False, "tp": False}


def test_one_link_carries_one_collective_at_a_time(factors):
    """c1 (10-50 ms) and c2 (ready at 20 ms, begun at 50 ms when the link freed, ended at 90 ms); both
    ranks wait for c2 from 70 ms. At 2 Gbit/s c2 begins at 30 and ends at 50; at 0.5 at 90 and 170."""
    rows = []
    for rank in (0, 1):
        rows.append({"rank": rank, "step": 1, "collective_key": "c1", "start_ns": 10, "end_ns": 50, "begin_ns": 10,
                     "collective_end_ns": 50, "transfer_ns": 40, "dimension": "dp"})
        rows.append({"rank": rank, "step": 1, "collective_key": "c2", "start_ns": 20, "end_ns": 90, "begin_ns": 50,
                     "collective_end_ns": 90, "transfer_ns": 40, "waited_ns": 20, "dimension": "dp"})
    replay = Replay(inputs(rows), steps(100, 20), factors)
    step_ns, _ = replay.run([Scenario(1.0), Scenario(2.0), Scenario(0.5), Scenario(1.0, rank_multiple=8)])
    # 16 ranks instead of 2: each dp all-reduce sends 2 * 15/16 of S, not 1: 75 ms each.
    assert (step_ns[0] / MS).tolist() == [100, 80, 180, 170]


def test_the_ranks_of_a_host_share_its_network_link(factors):
    """Ranks 0 and 1 of host a send 10-50 ms to ranks 2 and 3 of host b, which wait for them: two
    transfers of 20 ms on one link at once. Replayed, they take the link in turn: at 1 Gbit/s p0
    ends at 30 and p1 at 50, at 0.5 at 50 and 90. Rank 2's step is then 80 ms at the run's own
    rate and 100 at half of it; but the run measured 100 at its own rate, and no collective is
    faster at half of it, so both stay 100, while rank 3's grows by 40 ms. A link per rank would
    end both together, each step 20 ms longer."""
    rows = []
    for pair, (sender, receiver) in enumerate(((0, 2), (1, 3))):
        common = {"step": 1, "collective_key": f"p{pair}", "start_ns": 10, "end_ns": 50, "begin_ns": 10,
                  "collective_end_ns": 50, "transfer_ns": 20, "dimension": "pp"}
        turn = f"0 ranks {sender},{receiver}"
        rows.append({**common, "rank": sender, "op": "send", "way": "out", "turn": turn, "channel": "host a"})
        rows.append({**common, "rank": receiver, "op": "recv", "way": "in", "turn": turn, "channel": "host b", "waited_ns": 40})
    replay = Replay(inputs(rows), steps(100, 40, ranks=4), factors)
    step_ns, _ = replay.run([Scenario(1.0), Scenario(0.5)])
    assert (step_ns / MS).tolist() == [[100, 100], [100, 100], [100, 100], [100, 140]]


def test_a_link_is_free_once_a_transfer_is_through_and_a_group_takes_its_turns_to_the_end(factors):
    """Two groups share both hosts' links; every collective is 20 ms of transfer at 1 Gbit/s, then
    what no link shortens. Group 0's c1 runs 10-60 ms (30 ms of rest); group 1's c2, ready at 10,
    takes the link when c1's transfer is through, 30-60 ms (10 ms of rest); group 0's c3 waits for
    its group's c1 to end, 60-90 ms, and the ranks wait for it from 50 ms.
    At 0.5 Gbit/s: c1 sends until 50 and ends at 80, c2 runs 50-100 (its transfer through at 90),
    c3 90-140: a step of 150 ms. Were the link held to each collective's end, c2 would begin at 80
    and c3 at 130, a step of 190. At 2 Gbit/s c3 waits for c1's end at 50 though the link frees at
    30: a step of 80 ms, not 60."""
    rows = []
    for key, pg, begin, rest, end in (("c1", "0", 10, 30, 60), ("c2", "1", 30, 10, 60), ("c3", "0", 60, 10, 90)):
        for rank, host in ((0, "host a"), (1, "host b")):
            rows.append({"rank": rank, "step": 1, "collective_key": key, "pg": pg, "channel": host, "start_ns": 10,
                         "end_ns": end, "begin_ns": begin, "collective_end_ns": end, "transfer_ns": 20, "rest_ns": rest,
                         "waited_ns": 40 if key == "c3" else 0, "dimension": "dp"})
    step_ns, _ = Replay(inputs(rows), steps(100, 40), factors).run([Scenario(1.0), Scenario(0.5), Scenario(2.0)])
    assert (step_ns[0] / MS).tolist() == pytest.approx([100, 150, 80])


def test_two_ranks_sends_take_turns_both_ways(factors):
    """A 1F1B pipeline's step, as gloo ran it: rank 1 sends B to rank 0 at 10 ms, and rank 0's A to
    rank 1, ready at 10.5, goes once B is through (the notice that rank 1's receive was ready came
    behind B's data): B 10-30, A 30-50, 20 ms of transfer each at 1 Gbit/s. At 0.5 Gbit/s B runs
    10-50 and A 50-90: rank 0's wait ends 20 ms later, rank 1's 40. At 2 Gbit/s B 10-20, A 20-30.
    Each way on links of its own, A would begin at 10.5 and end 40 ms early at the run's own rate
    (a 1F1B pipeline's step came out 32 % short at 200 Mbit/s from 1 Gbit/s)."""
    rows = []
    for key, sender, receiver, ready, begin, end in (("B", 1, 0, 10, 10, 30), ("A", 0, 1, 5, 10.5, 50)):
        common = {"step": 1, "collective_key": key, "begin_ns": begin, "collective_end_ns": end, "transfer_ns": 20,
                  "dimension": "pp", "turn": "0 ranks 0,1"}
        rows.append({**common, "rank": sender, "op": "send", "way": "out", "channel": f"host {sender}", "start_ns": ready,
                     "end_ns": ready + 0.1, "tied": False})
        rows.append({**common, "rank": receiver, "op": "recv", "way": "in", "channel": f"host {receiver}",
                     "start_ns": 5 if key == "B" else 10.5,
                     "end_ns": end, "waited_ns": end - (5 if key == "B" else 10.5)})
    step_ns, _ = Replay(inputs(rows), steps(100, 60), factors).run([Scenario(1.0), Scenario(0.5), Scenario(2.0)])
    assert (step_ns / MS).round(6).tolist() == [[100, 120, 90], [100, 140, 80]]


def test_a_late_rank_is_waited_for_and_a_buffered_send_is_not(factors):
    """Rank 1 arrives 10 ms after rank 0 and both wait for the transfer; a send that returned at
    once leaves its rank free. Halving the transfer saves both 10 ms; the late rank's lateness stays."""
    rows = [
        {"rank": 0, "step": 1, "collective_key": "a", "start_ns": 30, "end_ns": 60, "begin_ns": 40,
         "collective_end_ns": 60, "transfer_ns": 20, "waited_ns": 30},
        {"rank": 1, "step": 1, "collective_key": "a", "start_ns": 40, "end_ns": 60, "begin_ns": 40,
         "collective_end_ns": 60, "transfer_ns": 20, "waited_ns": 20},
        {"rank": 0, "step": 1, "collective_key": "s", "op": "send", "way": "out", "turn": "0 ranks 0,1", "start_ns": 70,
         "end_ns": 70.1, "begin_ns": 70, "collective_end_ns": 90, "transfer_ns": 20, "tied": False, "dimension": "pp"},
        {"rank": 1, "step": 1, "collective_key": "s", "op": "recv", "way": "in", "turn": "0 ranks 0,1", "start_ns": 65,
         "end_ns": 90, "begin_ns": 70, "collective_end_ns": 90, "transfer_ns": 20, "waited_ns": 25, "dimension": "pp"},
    ]
    step_ns, _ = Replay(inputs(rows), steps(100, 30), factors).run([Scenario(1.0), Scenario(2.0), Scenario(1e9)])
    assert (step_ns[:, 1] / MS).round(6).tolist() == [90, 80]
    # At any speed rank 0 still waits the 10 ms rank 1 was late.
    assert step_ns[0, 2] / MS == pytest.approx(80, abs=1e-3)


def test_a_broadcasts_rank_that_needed_only_the_root_waits_as_long_as_its_data_takes(factors):
    """Worked by hand. Rank 0 broadcasts 20 ms of data (at 1 Gbit/s) from 10 ms to ranks 1 and 2:
    rank 1 has it at 30, while rank 2 arrives late, at 40, and has it at 60, as the root returns.
    Rank 1 waited 20 ms for the root's data, then computes: at 2 Gbit/s it waits 10 (its step
    90 ms), at 0.5 Gbit/s 40 (120). Taken as blocked until rank 2 arrived, its wait ended at 40 at
    any rate, and a ZeRO step over two ranks per host came out +20.8 % at 1 Gbit/s from
    200 Mbit/s (+4.0 % now)."""
    common = {"step": 1, "collective_key": "b", "op": "broadcast", "group_size": 3, "begin_ns": 40,
              "collective_end_ns": 60, "transfer_ns": 20, "rooted": True, "dimension": "dp"}
    rows = [{**common, "rank": 0, "start_ns": 10, "end_ns": 60, "waited_ns": 50},
            {**common, "rank": 1, "start_ns": 10, "end_ns": 30, "waited_ns": 20, "tied": False},
            {**common, "rank": 2, "start_ns": 40, "end_ns": 60, "waited_ns": 20}]
    step_ns, _ = Replay(inputs(rows), steps(100, 20, ranks=3), factors).run([Scenario(1.0), Scenario(2.0), Scenario(0.5)])
    assert (step_ns[1] / MS).round(6).tolist() == [100, 90, 120]


def predicted(store: Warehouse, run_id: str, gbps: float, *options: str, ranks: int = 2) -> dict:
    """`wirespeed whatif` of a run at one line rate, its own ranks, uncompressed."""
    out = wirespeed("whatif", run_id, "--warehouse", str(store.root), *options, "--ranks", str(ranks),
                    "--bandwidth", f"{gbps:g}", "--compression", "1", "--format", "json")
    (row,) = json.loads(out.stdout)
    return row


def ingested(folder, ranks: list[Rank], world_size: int, groups: dict[str, list[int]] | None = None) -> Warehouse:
    """The ranks' traces written to `folder`/run and ingested as run "r" at 1 Gbit/s, in `folder`/warehouse."""
    return ingested_run(write_run(folder / "run", ranks, world_size, groups=groups))


def ingested_run(run, link_gbps: float | None = 1) -> Warehouse:
    """Run folder `run` ingested as run "r" at `link_gbps` (None: no rate given), into a warehouse beside it."""
    store = Warehouse(run.parent / "warehouse")
    store.ensure()
    ingest_directly(store, run, "r", overrides=None if link_gbps is None else {"link_gbps": link_gbps})
    return store


def two_sizes_of_all_reduce() -> list[GlooRank]:
    """Two hosts of one gloo rank: a 1.25 MB all-reduce at 12.2 ms for 10 ms, then one of 0.625 MB
    at 25 ms for 9 ms, the ranks waiting in each; compute before and after."""
    return [GlooRank(rank, f"host-{rank}", (1, 0, 45_500), [(200, 10_000), (34_000, 5_000)],
                     [GlooCall("1", 12_200, 10_000, 312_500), GlooCall("1", 25_000, 9_000, 156_250)], pid=100 + rank)
            for rank in range(2)]


def test_a_send_that_outlived_its_receive_ends_with_it(tmp_path):
    """A send's instance can end long after its data arrived: an `isend` ends when its rank waits
    for it. Here the receive ends at 300 us, the send at 600. The transfer, and the send as the
    replay reads it, end at 300 us: to the send's end, the link looked busy for 500 us where the
    data took 200 (200,000 bits at 1 Gbit/s), and at 200 Mbit/s a pipeline of such sends came out
    +25 %."""
    p2p = {"name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "nelems": 6_250, "stream": 40}
    store = ingested(tmp_path, [
        Rank(0, "host-a", [(1, 0, 1_000)], [Kernel(0, 100), Kernel(100, 500, collective="send", **p2p)]),
        Rank(1, "host-b", [(1, 0, 1_000)], [Kernel(0, 300, collective="recv", **p2p), Kernel(300, 100)]),
    ], 2)
    (synced,) = table_rows(store, "SELECT end_ns, transfer_end_ns FROM collective_sync")
    assert (synced["end_ns"], synced["transfer_end_ns"]) == (ns(600), ns(300))
    rows = table_rows(store, "SELECT op, end_ns, collective_end_ns, transfer_ns + rest_ns AS share_ns FROM whatif_inputs ORDER BY op")
    assert [(row["op"], row["end_ns"], row["collective_end_ns"], row["share_ns"]) for row in rows] == [
        ("recv", ns(300), ns(300), 200_000), ("send", ns(300), ns(300), 200_000)]


def test_each_way_of_a_link_is_its_own_and_two_ranks_transfers_take_turns(tmp_path):
    """Worked by hand: two hosts of two GPUs, 1 Gbit/s, 200,000 bits a transfer (200 us at the line
    rate), a group per pipeline. Rank 0 sends to rank 2 while rank 3 sends to rank 1, both 0-200 us:
    each host's link carries one of them out and the other in, each at the line rate, so each has
    its 200 us. One busy period for both ways gave each half of it, and a 1F1B pipeline over two
    ranks per host came out 19 % short at 200 Mbit/s from 1 Gbit/s. Then ranks 0 and 2 send to
    each other: 2's transfer runs 310-510 us and 0's, from 300, ends at 710, having waited for it
    (two ranks' transfers take turns, as gloo's do: it sends once the receiver's notice has come
    the other way). From its turn, 0's took its 200 us; from its start, 410."""
    def rank(number: int, transfers: list[tuple[float, float, str, str]]) -> Rank:
        return Rank(number, f"host-{number // 2}", [(1, 0, 1_000)], [
            Kernel(start, dur, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", op, 6_250, pg=pg,
                   stream=40 if op == "send" else 41) for start, dur, op, pg in transfers], pid=100 + number)

    store = ingested(tmp_path, [
        rank(0, [(0, 200, "send", "a"), (300, 410, "send", "a"), (310, 200, "recv", "a")]),
        rank(1, [(0, 200, "recv", "b")]),
        rank(2, [(0, 200, "recv", "a"), (300, 410, "recv", "a"), (310, 200, "send", "a")]),
        rank(3, [(0, 200, "send", "b")]),
    ], 4, groups={"a": [0, 2], "b": [1, 3]})
    rows = table_rows(store, """SELECT DISTINCT collective_key, (begin_ns - min(begin_ns) OVER ()) // 1000 AS begin_us,
                                  transfer_ns + rest_ns AS share_ns FROM whatif_inputs ORDER BY begin_us, collective_key""")
    assert [(row["begin_us"], row["share_ns"]) for row in rows] == [(0, 200_000), (0, 200_000), (300, 200_000), (310, 200_000)]
    # What the replay serves the links by: a send holds its host's link out, a receive in; the three
    # transfers between ranks 0 and 2, either way, take turns on one connection, 1 and 3's on another.
    ways = table_rows(store, "SELECT rank, op, way, turn FROM whatif_inputs ORDER BY rank, begin_ns")
    assert all(row["way"] == {"send": "out", "recv": "in"}[row["op"]] for row in ways), ways
    turns = {row["rank"]: set() for row in ways}
    for row in ways:
        turns[row["rank"]].add(row["turn"])
    assert turns[0] == turns[2] and turns[1] == turns[3] and len(turns[0] | turns[1]) == 2 and None not in turns[0] | turns[1], ways


def stream_wait_run(tmp_path, recorded: bool) -> Warehouse:
    """Two GPUs on two hosts, 1 Gbit/s, one step: a matmul on stream 7 (0.2-10.2 ms), then a 1.25 MB
    all-reduce on stream 40 (10.2-20.2 ms, all transfer at the line rate), which stream 7 waits for
    before its last matmul (20.2-25.2 ms), while stream 8 computes beside both (10.3-22 ms). With
    `recorded`, the trace holds the waits as Kineto's `cuda_sync` events record them."""
    ranks = []
    for rank in (0, 1):
        ranks.append(Rank(rank, f"host-{rank}", [(1, 0, 30_000)], [
            Kernel(200, 10_000, launch_us=150),
            Kernel(10_200, 10_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 312_500, seq=1, stream=40,
                   launch_us=5_000, waits_for=0 if recorded else None),
            Kernel(10_300, 11_700, stream=8, launch_us=5_100),
            Kernel(20_200, 5_000, stream=7, launch_us=5_200, waits_for=1 if recorded else None),
        ]))
    return ingested(tmp_path / ("recorded" if recorded else "timeline"), ranks, 2)


@pytest.mark.parametrize("recorded", [True, False])
def test_a_kernel_that_waited_for_a_collectives_event_moves_with_it(tmp_path, recorded):
    """Worked by hand. At 0.5 Gbit/s the all-reduce ends at 30.2 ms and the last matmul, which waited
    for its event, with it at 35.2: the step is 10 ms longer. At 2 Gbit/s it ends at 15.2, the last
    matmul at 20.2, and stream 8's at 22: 3.2 ms shorter. Through the waits the trace records, the
    replay finds both. Without them the device was never idle waiting, so the timeline's replay
    keeps the rank's shift: the step's end, 5 ms after the all-reduce, absorbs 5 ms of a slower link,
    and a faster one saves nothing."""
    store = stream_wait_run(tmp_path, recorded)
    rows = {row["bandwidth_gbps"]: row for row in table_rows(
        store, "SELECT bandwidth_gbps, step_ns, scenario FROM whatif WHERE model = 'replay' AND ranks = 2 "
               "AND compression = 1 AND transfers = 'achieved'")}
    measured = table_rows(store, "SELECT step_ns FROM step_breakdown")
    assert {row["step_ns"] for row in measured} == {rows[1.0]["step_ns"]}
    own = rows[1.0]["step_ns"]
    slower, faster = (predicted(store, "r", gbps) for gbps in (0.5, 2.0))
    moved = (slower["step_ms"] - own / MS, faster["step_ms"] - own / MS)
    print(f"recorded={recorded}: step {own / MS:.1f} ms, at 0.5 Gbit/s {moved[0]:+.2f} ms, at 2 Gbit/s {moved[1]:+.2f} ms")
    said = "replay of 2 rank-steps, 2 of them through the waits their traces record" if recorded else "replay of 2 rank-steps"
    assert rows[1.0]["scenario"] == slower["scenario"] == said
    assert moved == pytest.approx((10, -3.2) if recorded else (5, 0), abs=0.01)


def test_collectives_that_shared_a_link_stretch_together_through_the_recorded_waits(tmp_path):
    """Worked by hand. Two all-reduces of 1.25 MB on two streams share the 1 Gbit/s link, one from
    10.2 to 30.2 ms, the other from 10.25 to 30.15 (two groups of the same two ranks); the last
    matmul waits for the first one's event. Each had half the link, so at the run's own rate the
    replay gives back the 35 ms step; at 0.5 Gbit/s the first ends at 50.2 ms and the step is 20 ms
    longer; at 2 Gbit/s it ends at 20.2 and the step is 10 ms shorter. With each collective's
    replayed time over its whole measured time, its share taken for all of it, the run's own rate
    gave 25 ms."""
    ranks = [Rank(rank, f"host-{rank}", [(1, 0, 40_000)], [
        Kernel(200, 10_000, launch_us=150),
        Kernel(10_200, 20_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 312_500, seq=1, stream=40,
               launch_us=5_000, waits_for=0),
        Kernel(10_250, 19_900, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 312_500, seq=1, stream=41,
               launch_us=5_050, pg="1", waits_for=0),
        Kernel(30_200, 5_000, stream=7, launch_us=5_200, waits_for=1),
    ]) for rank in (0, 1)]
    store = ingested(tmp_path, ranks, 2, groups={"1": [0, 1]})
    found = {gbps: predicted(store, "r", gbps) for gbps in (1.0, 0.5, 2.0)}
    print({gbps: row["step_ms"] for gbps, row in found.items()})
    assert "2 of them through the waits" in found[1.0]["scenario"]
    assert [found[gbps]["step_ms"] for gbps in (1.0, 0.5, 2.0)] == pytest.approx([35, 55, 25], abs=0.01)


def test_two_groups_kernels_of_one_name_that_start_together_each_move_with_their_own_transfer(tmp_path):
    """Worked by hand. Four ranks, two a host; two groups' all-reduces of one kernel name start at
    10.2 ms on two streams, 1.25 MB to 30.2 ms and 0.625 MB to 22.2 ms, and the last matmul waits
    for the smaller one. On each host's link the larger takes 10 ms of transfer and 3.3 of the
    CPU's, the smaller 5 and 1.7, so at 0.5 Gbit/s the larger stretches 1.75x, ending the step
    at +15 ms, and at 2 Gbit/s both 0.625x, the matmul and the larger ending together at -7.5 ms.
    Found by start and name alone, both were one kernel, and 2 Gbit/s saved nothing."""
    name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    ranks = [Rank(rank, f"host-{rank // 2}", [(1, 0, 60_000)], [
        Kernel(200, 10_000, launch_us=150),
        Kernel(10_200, 20_000, name, "allreduce", 312_500, seq=1, stream=40, launch_us=5_000, waits_for=0),
        Kernel(10_200, 12_000, name, "allreduce", 156_250, seq=1, stream=41, launch_us=5_050, pg="1", waits_for=0),
        Kernel(22_200, 5_000, stream=7, launch_us=5_200, waits_for=2),
    ], pid=100 + rank) for rank in range(4)]
    store = ingested(tmp_path, ranks, 4, groups={"1": [0, 1, 2, 3]})
    found = {gbps: predicted(store, "r", gbps, ranks=4) for gbps in (1.0, 0.5, 2.0)}
    assert "4 of them through the waits" in found[1.0]["scenario"]
    assert [found[gbps]["step_ms"] for gbps in (1.0, 0.5, 2.0)] == pytest.approx([30, 45, 22.5], abs=0.01)


def test_a_gloo_transfer_keeps_on_any_link_what_it_took_beyond_its_bits_where_its_hosts_ranks_talk_among_themselves(tmp_path):
    """Worked by hand. Two hosts of two gloo ranks, 1 Gbit/s, CPUs half busy. Each host's tp group
    all-reduces 1.25 MB through its own loopback, twice. Between them ranks 0 and 2 all-reduce
    2.5 MB over the network in 26 ms, 20 of them its bits at the line rate, while ranks 1 and 3
    wait for them in the second tp all-reduce. The 6 ms beyond the wire are the hosts', whose CPUs
    also carry their ranks' own transfers, and stay on any link: at 0.5 Gbit/s it takes 46 ms and
    every step grows 20 ms, at 2 Gbit/s 16 ms, 10 ms shorter. All 6 ms the protocol's (what CPUs
    with time to spare say where a host's ranks do not talk among themselves) gave +26 and -13 ms."""
    store = talking_hosts_run(tmp_path / "run", [GlooCall("1", 12_200, 26_000, 625_000)], 38_300)
    network = table_rows(store, "SELECT DISTINCT pg, scope, transfer_ns, rest_ns FROM whatif_inputs WHERE scope = 'inter'")
    assert network == [{"pg": "1", "scope": "inter", "transfer_ns": 20 * MS, "rest_ns": 6 * MS}]
    own, slower, faster = (predicted(store, "r", gbps, ranks=4)["step_ms"] for gbps in (1.0, 0.5, 2.0))
    print(f"step {own:.2f} ms, at 0.5 Gbit/s {slower - own:+.2f} ms, at 2 Gbit/s {faster - own:+.2f} ms")
    assert (slower - own, faster - own) == pytest.approx((20, -10), abs=0.01)

    # The same transfer between hosts of one rank each, which talk to no one else: the protocol's.
    alone = [GlooRank(rank, f"host-{rank}", (1, 0, 45_500), [(200, 10_000), (38_300, 5_000)],
                      [GlooCall("1", 12_200, 26_000, 625_000)], pid=100 + rank) for rank in range(2)]
    store = half_busy_run(write_gloo_run(tmp_path / "alone", alone, 2, {"1": [0, 1]}))
    assert table_rows(store, "SELECT DISTINCT transfer_ns, rest_ns FROM whatif_inputs") == [{"transfer_ns": 26 * MS, "rest_ns": 0}]
    own, slower, faster = (predicted(store, "r", gbps, ranks=2)["step_ms"] for gbps in (1.0, 0.5, 2.0))
    assert (slower - own, faster - own) == pytest.approx((26, -13), abs=0.01)


def test_a_point_to_point_transfer_between_talking_hosts_keeps_only_its_latency(tmp_path):
    """Worked by hand. The hosts above (their tp groups talk over loopback, 1 Gbit/s, CPUs half
    busy); rank 0 sends rank 2 1.25 MB in 12.5 ms, 80 % of the line rate, the way out of its host
    to itself. What it took beyond its bits is its protocol's, which scales: at 0.5 Gbit/s the step
    grows 12.5 ms, at 2 Gbit/s it shrinks 6.25. Kept as the hosts' (a collective's rule there),
    2.5 ms stayed: GPipe's pipeline, whose transfers each way filled 98 % of 200 Mbit/s, came out
    +11 % at 1 Gbit/s where it had been +1 %."""
    store = talking_hosts_run(tmp_path / "run", [GlooCall("1", 12_200, 12_500, 312_500, "send", peer=1)], 24_800,
                              received=[GlooCall("1", 12_200, 12_500, 312_500, "recv", peer=0)])
    network = table_rows(store, "SELECT DISTINCT op, wire_ns, transfer_ns, rest_ns FROM whatif_inputs WHERE scope = 'inter' ORDER BY op")
    assert network == [{"op": "recv", "wire_ns": 10 * MS, "transfer_ns": 12.5 * MS, "rest_ns": 0},
                       {"op": "send", "wire_ns": 10 * MS, "transfer_ns": 12.5 * MS, "rest_ns": 0}]
    own, slower, faster = (predicted(store, "r", gbps, ranks=4)["step_ms"] for gbps in (1.0, 0.5, 2.0))
    assert (slower - own, faster - own) == pytest.approx((12.5, -6.25), abs=0.01)


def test_where_the_host_filled_its_link_an_op_that_did_not_lost_the_difference_to_its_protocol(tmp_path):
    """Worked by hand. The hosts above (their tp groups talk over loopback, 1 Gbit/s, CPUs half
    busy); between them ranks 0 and 2 all-reduce 1.25 MB in 10 ms, its bits' time at the line rate,
    then all-gather 1.25 MB each (10 Mbit sent each) in 12.5 ms: 80 % of the most the host's link
    carried. The host reached the line rate, so the 2.5 ms are the all-gather's protocol and scale.
    Then they broadcast 50 KB in 1 ms, 40 % of the line rate: no protocol loses more than half
    (`protocol_least_efficiency()`), so that is bound by its latency, and of the 0.6 ms beyond
    its bits the host keeps 0.2. At 0.5 Gbit/s every step grows 10 + 12.5 + 0.8 ms, at 2 Gbit/s it
    shrinks 5 + 6.25 + 0.4. Kept as the host's (all an op took beyond its bits), the all-gather's
    2.5 ms gave +20 and -10 ms there, and an fsdp x tp step at 1 Gbit/s from 200 Mbit/s came out
    +20 %."""
    network = [GlooCall("1", 12_200, 10_000, 312_500), GlooCall("1", 22_300, 12_500, 312_500, "allgather"),
               GlooCall("1", 34_850, 1_000, 12_500, "broadcast")]
    store = talking_hosts_run(tmp_path / "run", network, 35_900)
    network = table_rows(store, "SELECT DISTINCT op, wire_ns, transfer_ns, rest_ns FROM whatif_inputs WHERE scope = 'inter' ORDER BY op")
    assert network == [{"op": "allgather", "wire_ns": 10 * MS, "transfer_ns": 12.5 * MS, "rest_ns": 0},
                       {"op": "allreduce", "wire_ns": 10 * MS, "transfer_ns": 10 * MS, "rest_ns": 0},
                       {"op": "broadcast", "wire_ns": 0.4 * MS, "transfer_ns": 0.8 * MS, "rest_ns": 0.2 * MS}]
    own, slower, faster = (predicted(store, "r", gbps, ranks=4)["step_ms"] for gbps in (1.0, 0.5, 2.0))
    assert (slower - own, faster - own) == pytest.approx((23.3, -11.65), abs=0.01)


def test_no_latency_is_longer_than_what_a_transfer_took_beyond_its_bits(tmp_path):
    """Worked by hand. Two hosts of one gloo rank, 1 Gbit/s, CPUs half busy (the protocol's rule):
    a 1.25 MB all-reduce in 10 ms, its bits' time at the line rate, then one of 0.625 MB in 9 ms.
    The line through them has an intercept of 8 ms, which the first cannot hold: it is all
    transfer, and the second keeps 4 ms, all it took beyond its 5 ms of bits. Taken whole, the
    intercept left the first 2 ms to scale: at 0.5 Gbit/s its step grew 3 ms, where it grows 15."""
    store = half_busy_run(write_gloo_run(tmp_path / "run", two_sizes_of_all_reduce(), 2, {"1": [0, 1]}))
    split = table_rows(store, "SELECT DISTINCT bytes, transfer_ns, rest_ns FROM whatif_inputs ORDER BY bytes DESC")
    assert split == [{"bytes": 1_250_000, "transfer_ns": 10 * MS, "rest_ns": 0},
                     {"bytes": 625_000, "transfer_ns": 5 * MS, "rest_ns": 4 * MS}]
    own, slower, faster = (predicted(store, "r", gbps, ranks=2)["step_ms"] for gbps in (1.0, 0.5, 2.0))
    assert (slower - own, faster - own) == pytest.approx((15, -7.5), abs=0.01)


def test_a_slower_link_covers_what_a_transfer_took_beyond_its_link_bound_time(tmp_path):
    """Worked by hand. Two hosts of one gloo rank, 1 Gbit/s, CPUs half busy (the protocol's rule):
    an all-reduce of 1.25 MB in 12.5 ms, 80 % of the line rate, then two all-gathers of 1.25 MB
    each (10 Mbit sent each), one in 10 ms and one in 20. The all-gathers typically carried 75 %
    (the median of 100 and 50 %), their best tenth 95 %; the all-reduce typically 80 %, so the link
    carries 80 % link-bound and the slow all-gather's link-bound time is 12.5 ms: 7.5 ms beyond it
    a slower link covers. At 0.5 Gbit/s it takes 25 ms (its 12.5 doubled) and the step grows
    12.5 + 10 + 5 ms; at 0.25 Gbit/s 37.5 + 30 + 30. A faster link shortens all of it: at 2 Gbit/s
    the step shrinks 6.25 + 5 + 10. Scaled whole, the slow all-gather grew 20 ms at 0.5 Gbit/s: an
    all-gather over six ranks waits between its five rounds for CPUs, which a slower link's rounds
    cover, and FSDP2's step at 200 Mbit/s came out +56 % from 1 Gbit/s."""
    ranks = [GlooRank(rank, f"host-{rank}", (1, 0, 60_000), [(200, 10_000), (53_000, 5_000)],
                      [GlooCall("1", 10_200, 12_500, 312_500), GlooCall("1", 22_800, 10_000, 312_500, "allgather"),
                       GlooCall("1", 32_900, 20_000, 312_500, "allgather")], pid=100 + rank) for rank in range(2)]
    store = half_busy_run(write_gloo_run(tmp_path / "run", ranks, 2, {"1": [0, 1]}))
    split = table_rows(store, "SELECT DISTINCT op, wire_ns, transfer_ns, rest_ns, beyond_link_ns FROM whatif_inputs "
                              "ORDER BY op, transfer_ns")
    assert split == [{"op": "allgather", "wire_ns": 10 * MS, "transfer_ns": 10 * MS, "rest_ns": 0, "beyond_link_ns": 0},
                     {"op": "allgather", "wire_ns": 10 * MS, "transfer_ns": 20 * MS, "rest_ns": 0, "beyond_link_ns": 7.5 * MS},
                     {"op": "allreduce", "wire_ns": 10 * MS, "transfer_ns": 12.5 * MS, "rest_ns": 0, "beyond_link_ns": 0}]
    own, slower, slowest, faster = (predicted(store, "r", gbps)["step_ms"] for gbps in (1.0, 0.5, 0.25, 2.0))
    assert (slower - own, slowest - own, faster - own) == pytest.approx((27.5, 97.5, -21.25), abs=0.01)


def test_the_latency_line_needs_no_line_rate(tmp_path):
    """Worked by hand. The two all-reduces above, 1.25 MB in 10 ms and 0.625 MB in 9 ms, in a run
    whose line rate nobody gave: the line through them keeps 8 ms of each, at any rate, the part
    that goes at full line rate too. At 10 Gbit/s their bits take 1 and 0.5 ms, so the step comes
    out 1.5 ms shorter. With the rate unknown the latency had been cut to what the periods took
    beyond their bits, as if that were 0: 17.5 ms shorter."""
    store = ingested_run(write_gloo_run(tmp_path / "run", two_sizes_of_all_reduce(), 2, {"1": [0, 1]}), link_gbps=None)
    split = table_rows(store, "SELECT DISTINCT bytes, link_gbps, transfer_ns, rest_ns, latency_ns FROM whatif_inputs ORDER BY bytes DESC")
    assert split == [{"bytes": 1_250_000, "link_gbps": None, "transfer_ns": 2 * MS, "rest_ns": 8 * MS, "latency_ns": 8 * MS},
                     {"bytes": 625_000, "link_gbps": None, "transfer_ns": 1 * MS, "rest_ns": 8 * MS, "latency_ns": 8 * MS}]
    assert predicted(store, "r", 10, "--at-line-rate")["step_ms"] == pytest.approx(45.5 - 1.5, abs=0.01)


def test_a_rank_that_resumed_before_its_collective_closed_waited_for_it(tmp_path):
    """Worked by hand. Two hosts of one gloo rank, 1 Gbit/s: after 10 ms of compute a 1.25 MB
    all-reduce runs 10.2-20.2 ms, all its bits at the line rate, on a worker thread; the training
    thread returns at once, waits, and resumes computing at 17.7 ms, 2.5 ms before the annotation
    closes (gloo's worker thread, waiting for a CPU, closed it 0.04 to 4.9 ms late on two cores with
    four ranks). It waited for the all-reduce: at 0.5 Gbit/s the step grows 10 ms, at 2 Gbit/s it
    shrinks 5. Counted as ending while the rank was busy, the wait went to no collective and stayed
    at every rate: +0.2 and 0 ms."""
    ranks = [GlooRank(rank, f"host-{rank}", (1, 0, 30_000), [(200, 10_000), (17_700, 5_500)],
                      [GlooCall("1", 10_200, 10_000, 312_500, returns_after_us=50)], pid=100 + rank) for rank in range(2)]
    store = half_busy_run(write_gloo_run(tmp_path / "run", ranks, 2, {"1": [0, 1]}))
    waits = table_rows(store, "SELECT rank, waited_ns, slack_ns FROM whatif_inputs ORDER BY rank")
    assert waits == [{"rank": r, "waited_ns": 7.5 * MS, "slack_ns": None} for r in range(2)]
    own, slower, faster = (predicted(store, "r", gbps, ranks=2)["step_ms"] for gbps in (1.0, 0.5, 2.0))
    assert (slower - own, faster - own) == pytest.approx((10, -5), abs=0.01)


def test_a_wait_that_ended_with_its_collective_leaves_the_next_one_its_slack(tmp_path):
    """Two hosts of one gloo rank: an all-reduce runs 10.2-20.2 ms while the rank waits, and ends
    as it resumes; another group's, begun at 10.3, ends 2 ms later, while the rank computes. The
    wait was the first one's, all of it; the second keeps the 7.8 ms until the step's end as slack.
    Given the wait's end as well, it would bind the rank to an all-reduce it did not wait for."""
    ranks = [GlooRank(rank, f"host-{rank}", (1, 0, 30_000), [(200, 10_000), (20_200, 5_000)],
                      [GlooCall("1", 10_200, 10_000, 312_500, returns_after_us=50),
                       GlooCall("2", 10_300, 11_900, 12_500, returns_after_us=50)], pid=100 + rank) for rank in range(2)]
    store = half_busy_run(write_gloo_run(tmp_path / "run", ranks, 2, {"1": [0, 1], "2": [0, 1]}))
    waits = table_rows(store, "SELECT DISTINCT bytes, waited_ns, slack_ns FROM whatif_inputs ORDER BY bytes DESC")
    assert waits == [{"bytes": 1_250_000, "waited_ns": 10 * MS, "slack_ns": None},
                     {"bytes": 50_000, "waited_ns": 0, "slack_ns": 7.8 * MS}]


def test_nccl_keeps_what_a_transfer_took_beyond_its_bits_as_the_protocols(tmp_path):
    """The same mesh on GPUs: tp all-reduces of 1.25 MB in 2 ms within each host, a 1.25 MB dp
    all-reduce in 13 ms between them, CPUs half busy. NCCL's intra-host path (NVLink, shared memory)
    is not the one its bytes take between hosts (RDMA, or sockets), so the 3 ms beyond the wire stay
    the protocol's and scale with the link."""
    allreduce = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    ranks = [Rank(rank, f"host-{rank // 2}", [(1, 0, 33_000)], [
        Kernel(200, 10_000, launch_us=150),
        Kernel(10_200, 2_000, allreduce, "allreduce", 312_500, pg=f"tp{rank // 2}", seq=1, stream=40, launch_us=5_000),
        Kernel(12_200, 13_000, allreduce, "allreduce", 312_500, pg="dp", seq=1, stream=41, launch_us=5_050)
        if rank % 2 == 0 else Kernel(12_200, 2_000, launch_us=5_050),
    ], pid=100 + rank) for rank in range(4)]
    store = half_busy_run(write_run(tmp_path / "run", ranks, 4, groups={"tp0": [0, 1], "tp1": [2, 3], "dp": [0, 2]}))
    network = table_rows(store, "SELECT DISTINCT pg, transfer_ns, rest_ns FROM whatif_inputs WHERE scope = 'inter'")
    assert network == [{"pg": "dp", "transfer_ns": 13 * MS, "rest_ns": 0}]


def talking_hosts_run(run, network: list[GlooCall], second_tp_us: float, received: list[GlooCall] | None = None) -> Warehouse:
    """Two hosts of two gloo ranks whose tp groups talk over loopback, ingested with CPUs half busy
    (`half_busy_run`). Each host's tp group all-reduces 1.25 MB at 10.2 ms and again at
    `second_tp_us`, for 2 ms; between the two, ranks 0 and 2 make the `network` calls (group "1";
    rank 2 the `received` ones where given) while ranks 1 and 3 compute 2 ms, then wait in the
    second tp all-reduce. The hosts' tp groups end 50 us apart, so that their instances are told
    apart."""
    ranks = []
    for rank in range(4):
        tp, crosses, late = "3" if rank < 2 else "4", rank % 2 == 0, 50 * (rank // 2)
        calls = [GlooCall(tp, 10_200, 2_000, 312_500)]
        compute = [(200, 10_000), (second_tp_us + 2_000 + late, 5_000)]
        if crosses:
            calls += [*(network if rank == 0 or received is None else received), GlooCall(tp, second_tp_us, 2_000 + late, 312_500)]
        else:
            calls.append(GlooCall(tp, 14_200, second_tp_us + 2_000 + late - 14_200, 312_500))
            compute.append((12_200, 2_000))
        ranks.append(GlooRank(rank, f"host-{rank // 2}", (1, 0, 45_500), compute, calls, pid=100 + rank))
    return half_busy_run(write_gloo_run(run, ranks, 4, {"1": [0, 2], "2": [1, 3], "3": [0, 1], "4": [2, 3]}))


def half_busy_run(run) -> Warehouse:
    """Run folder `run` with its hosts' CPUs sampled half busy every 5 ms, ingested (`ingested_run`)."""
    (run / "cpu.hosts.csv").write_text("t_ns,host,cpu,busy_ticks,idle_ticks\n" + "".join(
        f"{BASE_NS + t * MS},host-{host},-1,{50 * t},{50 * t}\n" for host in (0, 1) for t in range(-5, 55, 5)))
    return ingested_run(run)


def rail_run(tmp_path, nics: dict[int, int]) -> Warehouse:
    """Two hosts of two GPUs, 1 Gbit/s a NIC. Groups a (ranks 0 and 2) and b (1 and 3) each all-reduce
    1.25 MB at once, 10.2-20.2 ms, while every rank waits; the NCCL logs say which NIC each rank's
    communicator went through (`nics`)."""
    groups = {"a": [0, 2], "b": [1, 3]}
    ranks = [Rank(rank, f"host-{rank // 2}", [(1, 0, 30_000)], [
        Kernel(200, 10_000, launch_us=150),
        Kernel(10_200, 10_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 312_500, seq=1, stream=40,
               launch_us=5_000, pg="a" if rank in groups["a"] else "b"),
        Kernel(20_200, 5_000, launch_us=5_200),
    ], pid=100 + rank) for rank in range(4)]
    folder = tmp_path / "-".join(map(str, nics.values())) / "run"
    write_run(folder, ranks, 4, groups=groups)
    write_nccl_logs(folder, ranks, groups, nics)
    return ingested_run(folder)


@pytest.mark.parametrize("nics", [{0: 0, 1: 1, 2: 0, 3: 1}, {0: 0, 1: 0, 2: 0, 3: 0}])
def test_ranks_on_nics_of_their_own_do_not_queue(tmp_path, nics):
    """Each rank's network link is the NIC its NCCL log names, which a host's ranks share only where
    they went through the same one. Worked by hand, on a NIC each (rail-optimised): each
    all-reduce had its NIC's line rate, so at 0.5 Gbit/s each takes 20 ms, every step 10 ms longer,
    and at 2 Gbit/s 5 ms, 5 ms shorter. Replayed on one link per host, as before the NICs were
    read, the two took 5 ms of it each and queued: +7.5 and -3.75 ms against the replay at 1 Gbit/s."""
    store = rail_run(tmp_path, nics)
    channels = {(row["rank"], row["channel"]) for row in table_rows(store, "SELECT rank, channel FROM whatif_inputs")}
    assert channels == {(rank, f"host host-{rank // 2} nic {nic}") for rank, nic in nics.items()}
    # Each NIC carried its own all-reduce at its line rate, no more.
    used = table_rows(store, "SELECT interface, count(utilization_note) AS above_line_rate FROM net_utilization "
                             "WHERE source = 'collectives' GROUP BY interface")
    assert {row["interface"] for row in used} == {f"nic {nic}" for nic in nics.values()}
    if len(set(nics.values())) > 1:
        assert all(row["above_line_rate"] == 0 for row in used), used
    if len(set(nics.values())) == 1:
        return
    own = table_rows(store, "SELECT step_ns FROM whatif WHERE model = 'replay' AND ranks = 4 AND bandwidth_gbps = 1 "
                            "AND compression = 1 AND transfers = 'achieved'")[0]["step_ns"]
    found = tuple(predicted(store, "r", gbps, ranks=4)["step_ms"] - own / MS for gbps in (0.5, 2.0))
    print(f"NICs {nics}: step {own / MS:.1f} ms, at 0.5 Gbit/s {found[0]:+.2f} ms, at 2 Gbit/s {found[1]:+.2f} ms")
    assert own == 25 * MS and found == pytest.approx((10, -5), abs=0.01)


collective_case = st.tuples(st.floats(0, 80), st.floats(0.5, 30), st.floats(0, 20), st.floats(0, 10), st.booleans(),
                            st.sampled_from(["allreduce", "send"]), st.sampled_from(["0", "1"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(collective_case, min_size=1, max_size=6))
def test_a_faster_link_never_slows_a_step_and_a_slower_one_never_speeds_it(factors, cases):
    """Any collectives (begin, duration, how late rank 1 came, what no link shortens, whether the
    ranks waited for it, all-reduce or send/receive, which of two groups), overlapping or not:
    each rank-step's replayed length never grows with the line rate, as achieved or at full line
    rate; the run's own rate gives back the run, and its full line rate never a longer step."""
    rows = []
    for k, (begin, dur, late, rest, waited, op, pg) in enumerate(cases):
        for rank in (0, 1):
            start = begin - (late if rank == 0 else 0)
            point_to_point = {"op": ("send", "recv")[rank], "way": ("out", "in")[rank], "turn": f"{pg} ranks 0,1"}
            rows.append({"rank": rank, "step": 1, "collective_key": f"c{k}", "pg": pg,
                         **({"op": op} if op == "allreduce" else point_to_point),
                         "start_ns": start, "end_ns": begin + dur, "begin_ns": begin, "collective_end_ns": begin + dur,
                         "transfer_ns": max(dur - rest, 0), "rest_ns": min(rest, dur),
                         "waited_ns": min(begin + dur - start, dur) if waited else 0, "tied": waited})
    rates = [0.25, 0.5, 1.0, 2.0, 4.0]
    step_ns, _ = Replay(inputs(rows), steps(120, 20), factors).run(
        [Scenario(rate) for rate in rates] + [Scenario(rate, line_rate=True) for rate in rates])
    for achieved, at_line_rate in zip(step_ns[:, :5], step_ns[:, 5:]):
        assert (np.diff(achieved) <= 1e-6).all() and (np.diff(at_line_rate) <= 1e-6).all(), (achieved, at_line_rate)
        assert achieved[2] == pytest.approx(120 * MS) and at_line_rate[2] <= 120 * MS + 1e-6, (achieved, at_line_rate)


# --- real jobs on the emulated cluster -------------------------------------------------------------

REPLAY_TOLERANCE = 0.15
# The pipeline's raw replayed step at the faster link had erred -7 to +24 % (docs/whatif.md); with
# the other run's compute held, +6 % in the runs of 2026-12-04: a wider limit, left until more runs show it.
PIPELINE_REPLAY_TOLERANCE = 0.25
# Of scaling factor, replay and paper both at line rate, on DDP, the median run. The paper starts a
# bucket when DDP's hook called its all-reduce (`gradient_buckets`), the replay when gloo's thread
# began it, and keeps the step's tail after it: at 1 Gbit/s the replay was 0.00-0.05 below the paper
# in the runs of 2026-12-05 here, 0.08 in one on CI.
PAPER_AGREEMENT = 0.03


@pytest.mark.parametrize("job", ["ddp", "fsdp", "tp", "pp"])
def test_replay_predicts_the_other_line_rate(cluster_runs, store, job):
    """The least disturbed run at each rate (the shortest mean step by the job's own clock: other
    work on the machine only lengthens runs, and nearly doubled one job's steps at 1 Gbit/s in one
    test run) replayed at the other's line rate, against the step that run measured: within 15 %
    (the pipeline 25 %).

    The replay keeps a run's compute as measured and moves its communication. On this machine the
    same ops compute slower in a run at the slower link (tensor parallel: the forward matmul's median
    7.4-10.7 ms at 200 Mbit/s, 6.0-8.3 ms at 1 Gbit/s over twelve runs each; the CPUs, idle for
    longer, were 60 % busy against 88 %), which no trace of the other run can foresee. So each
    prediction is judged with the other run's own compute in place of its run's: on what it moved."""
    cost = cluster_runs(job)
    for run in cost.runs:
        ingest_directly(store, run.run_dir)
    slow, fast = cost.quietest_slow, cost.quietest_fast
    own = {run.run_dir: predicted(store, run.run_dir.name, gbps) for run, gbps in
           ((slow, cost.slow_mbit / 1000), (fast, cost.fast_mbit / 1000))}
    errors = {}
    for name, run, other in (("slow at fast", slow, fast), ("fast at slow", fast, slow)):
        at_its_rate = own[other.run_dir]
        row = predicted(store, run.run_dir.name, at_its_rate["bandwidth_gbps"])
        measured_ms = other.median_step_ns / 1e6
        with_its_compute = row["step_ms"] - row["compute_ms"] + at_its_rate["compute_ms"]
        errors[name] = with_its_compute / measured_ms - 1
        print(f"{job}: replay of {run.run_dir.name} at {row['bandwidth_gbps']:g} Gbit/s: {row['step_ms']:.0f} ms "
              f"({row['step_ms'] / measured_ms - 1:+.1%}); with the other run's compute ({at_its_rate['compute_ms']:.0f} "
              f"ms, not {row['compute_ms']:.0f}) {with_its_compute:.0f} ms; measured {measured_ms:.0f} ms ({errors[name]:+.1%})")
    tolerance = PIPELINE_REPLAY_TOLERANCE if job == "pp" else REPLAY_TOLERANCE
    assert all(abs(error) <= tolerance for error in errors.values()), errors
    if job == "ddp":
        # Replay and paper both at the full line rate, as the paper's model assumes, on every run: the
        # median of them all. The replay keeps a run's late ranks, which the paper does not see: runs
        # the machine's other work disturbed (the hypervisor took 6-32 % of the CPUs in some) put
        # them up to 0.11 apart, and judged on the two least disturbed runs alone, one such run failed.
        disagreements = []
        for run, gbps in [(pair.slow, cost.fast_mbit / 1000) for pair in cost.pairs] + \
                         [(pair.fast, cost.slow_mbit / 1000) for pair in cost.pairs]:
            at_line_rate = predicted(store, run.run_dir.name, gbps, "--at-line-rate")
            paper = predicted(store, run.run_dir.name, gbps, "--model", "paper")
            disagreements.append(at_line_rate["scaling_factor"] - paper["scaling_factor"])
            print(f"ddp: {run.run_dir.name} at {gbps:g} Gbit/s: scaling factor: replay at line rate "
                  f"{at_line_rate['scaling_factor']:.3f}, paper {paper['scaling_factor']:.3f}")
        assert abs(statistics.median(disagreements)) <= PAPER_AGREEMENT, disagreements
