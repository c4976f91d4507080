"""Bandwidth, utilisation and cross-rank matching, checked against hand-computed numbers."""

from __future__ import annotations

import pytest

from conftest import ingest_directly, table_rows as rows
from pipelines.settings import Settings
from pipelines.warehouse import rollups, sql
from pipelines.warehouse.store import Warehouse
from synthetic import Kernel, Rank, ns, write_run

MB_FLOATS = 1_000_000  # 4,000,000 bytes of float


def two_ranks(hosts: tuple[str | None, str | None]) -> list[Rank]:
    """Rank 1 arrives 30 us late at the all-reduce; rank 0 arrives last at the all-gather."""
    gemm = Kernel(100, 500)
    return [
        Rank(0, hosts[0], [(1, 0, 10_000)], [
            gemm,
            Kernel(1000, 100, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", MB_FLOATS, seq=5, stream=40),
            Kernel(2000, 50, "ncclDevKernel_AllGather_RING_LL", "_allgather_base", 1000, comms_id=2**64 - 1, stream=40),
            Kernel(3000, 10, "ncclDevKernel_Broadcast_RING_LL", "broadcast", 10, stream=40),
        ]),
        Rank(1, hosts[1], [(1, 0, 10_000)], [
            gemm,
            Kernel(1030, 70, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", MB_FLOATS, seq=5, stream=40),
            Kernel(1990, 60, "ncclDevKernel_AllGather_RING_LL", "_allgather_base", 1000, comms_id=2**64 - 1, stream=40),
            Kernel(3002, 8, "ncclDevKernel_Broadcast_RING_LL", "broadcast", 10, stream=40),
        ]),
    ]


def ingest(tmp_path, hosts, overrides) -> Warehouse:
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, write_run(tmp_path / "run", two_ranks(hosts), 2), "bw", overrides=overrides)
    return store



@pytest.fixture
def inter_node(tmp_path):
    return ingest(tmp_path, ("host-a", "host-b"), {"link_gbps": 800})


def test_matching_prefers_comms_id_then_seq_then_order(inter_node):
    synced = rows(inter_node, "SELECT * FROM collective_sync ORDER BY first_start_ns")
    assert [(c["op"], c["match_method"], c["collective_key"], c["ranks"]) for c in synced] == [
        ("allreduce", "pg_seq", "pg 0 seq 5", 2),
        ("allgather", "comms_id", f"comms_id {2**64 - 1}", 2),
        ("broadcast", "pg_step_order", "pg 0 step 1 #3", 2),
    ]


def test_transfer_wait_skew_and_last_rank(inter_node):
    synced = {c["op"]: c for c in rows(inter_node, "SELECT * FROM collective_sync")}
    allreduce = synced["allreduce"]
    assert allreduce["transfer_ns"] == 70_000 and allreduce["skew_ns"] == 30_000 and allreduce["last_rank"] == 1
    assert allreduce["max_wait_ns"] == 30_000 and allreduce["total_wait_ns"] == 30_000
    assert allreduce["first_start_ns"] == ns(1000) and allreduce["end_ns"] == ns(1100)
    assert synced["allgather"]["last_rank"] == 0 and synced["allgather"]["transfer_ns"] == 50_000
    waits = {(b["rank"], b["op"]): (b["wait_ns"], b["last_arrival"]) for b in rows(inter_node, "SELECT * FROM collective_bw")}
    assert waits == {
        (0, "allreduce"): (30_000, False), (1, "allreduce"): (0, True),
        (0, "allgather"): (0, True), (1, "allgather"): (10_000, False),
        (0, "broadcast"): (2_000, False), (1, "broadcast"): (0, True),
    }



def test_a_broadcast_root_that_returns_once_its_data_is_buffered_does_not_time_the_transfer(tmp_path):
    """The root hands 4 MB to its socket and returns after 5 us; the other rank, there from the
    same instant, receives it in 45 us (40 us of bits at 800 Gbit/s). The transfer is 45 us, not 5,
    and nobody waited."""
    ranks = [
        Rank(r, f"host-{r}", [(1, 0, 10_000)], [
            Kernel(1000, dur, "ncclDevKernel_Broadcast_RING_LL", "broadcast", MB_FLOATS, seq=1, stream=40),
        ]) for r, dur in ((0, 5), (1, 45))
    ]
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, write_run(tmp_path / "run", ranks, 2), "bcast", overrides={"link_gbps": 800})
    (synced,) = rows(store, "SELECT * FROM collective_sync")
    assert synced["transfer_ns"] == 45_000 and synced["total_wait_ns"] == 0
    for b in rows(store, "SELECT * FROM collective_bw"):
        assert b["utilization"] == pytest.approx(32e6 / 45e3 / 800) and b["utilization_note"] is None
        assert b["wait_ns"] == 0

def test_bandwidth_formulas(inter_node):
    bw = {(b["rank"], b["op"]): b for b in rows(inter_node, "SELECT * FROM collective_bw")}
    allreduce = bw[(0, "allreduce")]
    # S = 1e6 floats = 4e6 bytes = 32e6 bits; over 100 us: 320 Gbit/s; factor 2(n-1)/n = 1 for n = 2.
    assert allreduce["bytes"] == 4_000_000 and allreduce["scope"] == "inter"
    assert allreduce["algbw_gbps"] == pytest.approx(320.0)
    assert allreduce["busbw_gbps"] == pytest.approx(320.0)
    assert allreduce["transfer_busbw_gbps"] == pytest.approx(32e6 / 70e3)
    assert allreduce["link_gbps"] == 800 and allreduce["link_source"] == "override at ingest"
    assert allreduce["utilization"] == pytest.approx(32e6 / 70e3 / 800)
    allgather = bw[(1, "allgather")]
    # allgather: S is the whole output (1000 floats); factor (n-1)/n = 0.5; own duration 60 us.
    assert allgather["bytes"] == 4000
    assert allgather["algbw_gbps"] == pytest.approx(32e3 / 60e3)
    assert allgather["busbw_gbps"] == pytest.approx(32e3 / 60e3 * 0.5)
    assert allgather["transfer_busbw_gbps"] == pytest.approx(32e3 / 50e3 * 0.5)
    assert bw[(0, "broadcast")]["busbw_gbps"] == pytest.approx(8 * 40 / 10e3)  # factor 1


def test_step_sync(inter_node):
    (step,) = rows(inter_node, "SELECT * FROM step_sync")
    assert step["step"] == 1 and step["ranks"] == 2 and step["collectives"] == 3
    # Rank 0 waited 30 + 0 + 2 us, rank 1 10 us: the others waited for rank 1.
    assert step["straggler_rank"] == 1 and step["straggler_last_arrivals"] == 2
    assert step["wait_ns"] == 42_000 and step["max_skew_ns"] == 30_000
    # Nothing computes while the collectives run: all 160 + 138 us are exposed, 42 us of it waiting.
    assert step["exposed_comm_ns"] == 298_000 and step["exposed_wait_ns"] == 42_000
    assert step["exposed_transfer_ns"] == 256_000 and step["wait_share"] == pytest.approx(42 / 298)


def test_derived_network_traffic(inter_node):
    windows = rows(inter_node, "SELECT * FROM net_utilization WHERE source = 'collectives' ORDER BY host")
    # One 100 ms window per host; the NIC moves factor x S once per host per collective.
    assert [(w["host"], w["interface"], w["tx_bytes"]) for w in windows] == [
        ("host-a", "network", 4_000_000 + 2_000 + 40), ("host-b", "network", 4_000_000 + 2_000 + 40),
    ]
    assert windows[0]["window_end_ns"] - windows[0]["window_start_ns"] == 100_000_000
    assert windows[0]["utilization"] == pytest.approx(8 * 4_002_040 / 1e8 / 800)
    summary = rows(inter_node, "SELECT * FROM network_summary WHERE host = 'host-a'")
    assert summary[0]["comm_windows"] == 1 and summary[0]["peak_gbps"] == pytest.approx(8 * 4_002_040 / 1e8)


def test_two_ranks_of_a_host_sending_at_once_fill_its_nic_though_each_gets_half(tmp_path):
    """Two hosts of two ranks; ranks 0 and 2 all-reduce in one group, 1 and 3 in another, both at
    once: 10 MB (factor 1 for two ranks) in 10 ms each, 8 Gbit/s, half of the 16 Gbit/s NIC.
    Rank 1's starts 2 ms after rank 0's, so host-a's NIC is in use 12 ms for 160 Mbit."""
    floats = 2_500_000

    def rank(number, host, start_us, pg):
        return Rank(number, host, [(1, 0, 20_000)], [
            Kernel(100, 500),
            Kernel(start_us, 10_000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", floats, pg=pg, seq=1,
                   stream=40),
        ])

    ranks = [rank(0, "host-a", 1_000, "1"), rank(1, "host-a", 3_000, "2"),
             rank(2, "host-b", 1_000, "1"), rank(3, "host-b", 3_000, "2")]
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, write_run(tmp_path / "run", ranks, 4, groups={"1": [0, 2], "2": [1, 3]}), "pairs",
                    overrides={"link_gbps": 16})
    own = rows(store, "SELECT DISTINCT rank, utilization FROM collective_bw ORDER BY rank")
    assert [r["utilization"] for r in own] == pytest.approx([0.5] * 4)
    summary = rows(store, "SELECT * FROM network_summary WHERE source = 'collectives' ORDER BY host")
    assert [(s["host"], s["interface"], s["transfer_ns"]) for s in summary] == [
        ("host-a", "network", 12_000_000), ("host-b", "network", 12_000_000),
    ]
    assert [s["transfer_utilization"] for s in summary] == pytest.approx([160e6 / 12e6 / 16] * 2)
    con = rollups.session(store, Settings())
    rollups.recompute(con)
    verdict = con.sql("SELECT achieved_busbw_gbps, utilization FROM verdict").fetchall()
    con.close()
    assert verdict == [(pytest.approx(160e6 / 12e6), pytest.approx(160e6 / 12e6 / 16))]


def summarise_network(host_traffic: str, window: str) -> dict:
    """network_summary of one host's network over one window of net_utilization, from its
    `_host_traffic` rows (VALUES) and that window's (rx_bytes, tx_bytes, window_end_ns, utilization)."""
    con = sql.session()
    try:
        sql.use_macros(con)
        sql.set_variables(con, run_id="r")
        con.execute(f"""CREATE TEMP TABLE _host_traffic AS SELECT * FROM (VALUES {host_traffic})
            AS t(host, interface, collective_key, direction, bytes, transfer_start_ns, transfer_end_ns)""")
        con.execute(f"""CREATE TEMP TABLE net_utilization AS SELECT 'r' AS run_id, 'host-a' AS host,
            'collectives' AS source, 'network' AS interface, 0 AS window_start_ns, window_end_ns, rx_bytes, tx_bytes,
            8.0 * rx_bytes / window_end_ns AS rx_gbps, 8.0 * tx_bytes / window_end_ns AS tx_gbps, 1.0 AS link_gbps,
            utilization FROM (VALUES {window}) AS w(rx_bytes, tx_bytes, window_end_ns, utilization)""")
        result = con.execute(sql.table("network_summary").select())
        (summary,) = [dict(zip([c[0] for c in result.description], row, strict=True)) for row in result.fetchall()]
    finally:
        con.close()
    return summary


def test_a_hosts_sends_out_and_receives_in_at_once_each_take_their_own_direction():
    """A NIC carries as much each way at once: a pipeline stage's 10 Mbit send out and the 10 Mbit
    receive in beside it, both over the same 10 ms, use 1 Gbit/s of a 1 Gbit/s link, not twice it."""
    summary = summarise_network("""('host-a', 'network', 'forward', 'out', 1.25e6, 0, 10_000_000),
        ('host-a', 'network', 'backward', 'in', 1.25e6, 0, 10_000_000),
        ('host-a', 'network', 'gradients', 'both', 1.25e6, 20_000_000, 30_000_000)""",
                                "(2_500_000, 2_500_000, 100_000_000, 0.2)")
    # Each way: 10 Mbit in 10 ms, then the all-reduce's 10 Mbit in another 10 ms.
    assert summary["transfer_ns"] == 20_000_000
    assert summary["transfer_gbps"] == pytest.approx(1.0) and summary["transfer_utilization"] == pytest.approx(1.0)


def test_intra_node_without_a_rate_is_flagged(tmp_path):
    store = ingest(tmp_path, ("same", "same"), {"link_gbps": 800})
    bw = rows(store, "SELECT DISTINCT scope, link_gbps, link_source, utilization FROM collective_bw")
    assert bw == [{"scope": "intra", "link_gbps": None, "link_source": "unknown: no intra-node link rate was given", "utilization": None}]
    given = ingest(tmp_path / "given", ("same", "same"), {"link_gbps": 800, "intra_link_gbps": 2400})
    assert {r["link_gbps"] for r in rows(given, "SELECT link_gbps FROM collective_bw")} == {2400}


def test_unknown_hosts_assume_the_network(tmp_path):
    store = ingest(tmp_path, (None, None), {"link_gbps": 100})
    bw = rows(store, "SELECT DISTINCT scope, link_gbps, link_source FROM collective_bw")
    assert bw == [{"scope": "unknown", "link_gbps": 100, "link_source": "override at ingest (hosts unknown: assumed inter-node)"}]


def test_hta_two_rank_traces_match_by_stream_and_step(shared_warehouse):
    synced = rows(shared_warehouse, "SELECT * FROM collective_sync WHERE run_id = 'sampled_2rank'")
    assert len(synced) == 10 and all(c["ranks"] == 2 and c["match_method"] == "pg_step_order" for c in synced)
    assert {c["collective_key"].split(" step")[0] for c in synced} == {"stream 84", "stream 203"}
    steps = rows(shared_warehouse, "SELECT * FROM step_sync WHERE run_id = 'sampled_2rank' ORDER BY step")
    assert [s["step"] for s in steps] == [551, 552] and all(0 < s["wait_share"] < 1 for s in steps)


def test_waiting_for_a_busy_rank_is_not_the_network(tmp_path):
    """A pipeline's first send returns once its data is buffered (5 us) while the receive waits
    100 us for the sender's compute, then 200 us for the data; the sender then waits at an
    all-reduce, 190 us while the receiver is still receiving (the network holds both up) and 50 us
    while it computes."""
    p2p = {"name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "nelems": MB_FLOATS, "stream": 40}
    allreduce = {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "collective": "allreduce", "nelems": 1000, "stream": 41}
    ranks = [
        Rank(0, "host-a", [(1, 0, 10_000)], [
            Kernel(0, 100), Kernel(100, 5, collective="send", **p2p), Kernel(110, 290, **allreduce),
        ]),
        Rank(1, "host-b", [(1, 0, 10_000)], [
            Kernel(0, 300, collective="recv", **p2p), Kernel(300, 50), Kernel(350, 50, **allreduce),
        ]),
    ]
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, write_run(tmp_path / "run", ranks, 2), "pp", overrides={"link_gbps": 800})
    synced = {c["op"]: c for c in rows(store, "SELECT * FROM collective_sync")}
    # The data crossed from the send's start to the receive's end, not in the send's 5 us.
    assert synced["send"]["transfer_ns"] == 200_000 and not synced["send"]["op_mismatch"]
    assert synced["allreduce"]["transfer_ns"] == 50_000
    waits = {(b["rank"], b["op"]): b["wait_ns"] for b in rows(store, "SELECT * FROM collective_bw")}
    assert waits == {(0, "send"): 0, (1, "recv"): 100_000, (0, "allreduce"): 240_000, (1, "allreduce"): 0}
    (step,) = rows(store, "SELECT * FROM step_sync")
    # Exposed: 5 + 290 us on rank 0, 300 + 50 us on rank 1; waiting for a busy rank: 100 + 50 us.
    assert step["exposed_comm_ns"] == 645_000 and step["exposed_wait_ns"] == 150_000
    assert step["exposed_transfer_ns"] == 495_000 and step["straggler_rank"] == 1


def test_a_host_measured_above_its_line_rate_reads_the_line_rate_and_says_why():
    """A pipeline's send is timed from its later start to its receive's end, on two hosts' clocks:
    20 Mbit in 10 ms reads 2 Gbit/s on a 1 Gbit/s link. Utilisation stays at 1, and the row says
    why it measured more."""
    summary = summarise_network("('host-a', 'network', 'forward', 'out', 2.5e6, 0, 10_000_000)",
                                "(0, 2_500_000, 10_000_000, 1.0)")
    assert summary["transfer_gbps"] == pytest.approx(2.0) and summary["peak_gbps"] == pytest.approx(2.0)
    assert [summary[c] for c in ("transfer_utilization", "peak_utilization", "mean_utilization")] == [1.0, 1.0, 1.0]
    assert summary["utilization_note"].startswith("measured at 200% of the 1 Gbit/s line rate")
    assert "clock skew" in summary["utilization_note"]


def test_a_window_measured_above_its_line_rate_reads_the_line_rate_and_says_why():
    """25 MB sent out of a host in one 100 ms window is 2 Gbit/s: on a 1 Gbit/s link the window's
    utilisation stays at 1 with a note, and a window at half the rate keeps its 0.5 and no note."""
    con = sql.session()
    try:
        sql.use_macros(con)
        sql.set_variables(con, run_id="r")
        con.execute("CREATE TEMP TABLE runs AS SELECT 1.0 AS link_gbps, 'eth0' AS link_interface")
        con.execute("CREATE TEMP TABLE net_samples (host VARCHAR, interface VARCHAR, t_ns BIGINT, rx_bytes BIGINT, tx_bytes BIGINT)")
        con.execute("CREATE TEMP TABLE ranks AS SELECT 0 AS rank, 'host-a' AS host")
        con.execute("CREATE TEMP TABLE rank_breakdown AS SELECT 0 AS rank, 0 AS span_start_ns, 200_000_000 AS span_end_ns")
        con.execute("""CREATE TEMP TABLE _host_traffic AS SELECT * FROM (VALUES
            ('host-a', 'network', 'forward', 'out', 25e6, 0, 100_000_000),
            ('host-a', 'network', 'backward', 'out', 6.25e6, 100_000_000, 200_000_000))
            AS t(host, interface, collective_key, direction, bytes, transfer_start_ns, transfer_end_ns)""")
        windows = con.execute(f"SELECT utilization, utilization_note FROM ({sql.table('net_utilization').query}) "
                              "ORDER BY window_start_ns").fetchall()
    finally:
        con.close()
    (first, first_note), (second, second_note) = windows
    assert (first, second) == (1.0, pytest.approx(0.5)) and second_note is None
    assert first_note.startswith("measured at 200% of the 1 Gbit/s line rate") and "clock skew" in first_note


def test_a_step_in_which_no_rank_waited_names_its_lowest_rank_the_straggler():
    """Eight ranks, listed from the highest, each at one all-reduce a step with no wait, for 1000
    steps: all tie, and each step's straggler is rank 0. DuckDB's `arg_min` alone keeps any of the
    tied: on one thread, rank 7 of every step here; on two, rank 5 or 7 by the step."""
    con = sql.session({"threads": 1})
    try:
        sql.use_macros(con)
        sql.set_variables(con, run_id="tied")
        for name in ("collective_bw", "collective_sync", "step_timeline", "step_breakdown"):
            con.execute(f'CREATE TEMP TABLE "{name}" AS {sql.table(name).empty()}').fetchall()
        con.execute(
            "INSERT INTO collective_bw (run_id, rank, step, op, collective_key, start_ns, wait_ns, last_arrival) "
            "SELECT 'tied', rank, step, 'allreduce', 'pg 0 seq ' || step, 1000, 0, false "
            "FROM range(7, -1, -1) AS r(rank), range(1000) AS s(step)"
        ).fetchall()
        stragglers = con.execute(
            f"SELECT straggler_rank, ranks, count(*) FROM ({sql.table('step_sync').select()}) GROUP BY ALL"
        ).fetchall()
    finally:
        con.close()
    assert stragglers == [(0, 8, 1000)]


def test_of_ranks_that_arrived_at_once_the_lowest_arrived_last():
    """Eight ranks, listed from the highest, start 1000 all-reduces at the same instant: each
    collective's last rank is rank 0. DuckDB's `arg_max` alone keeps any of the tied: rank 7 here."""
    con = sql.session({"threads": 1})
    try:
        sql.use_macros(con)
        sql.set_variables(con, run_id="tied")
        con.execute(f'CREATE TEMP TABLE collectives AS {sql.table("collectives").empty()}').fetchall()
        con.execute(
            "INSERT INTO collectives (run_id, rank, step, op, collective_key, match_method, start_ns, end_ns, dur_ns, bytes, group_size) "
            "SELECT 'tied', rank, k, 'allreduce', 'pg 0 seq ' || k, 'pg_seq', 1000, 2000, 1000, 4, 8 "
            "FROM range(7, -1, -1) AS r(rank), range(1000) AS s(k)"
        ).fetchall()
        last = con.execute(f"SELECT last_rank, count(*) FROM ({sql.table('collective_sync').select()}) GROUP BY ALL").fetchall()
    finally:
        con.close()
    assert last == [(0, 1000)]
