"""The critical path of a step: against HTA's on its own test traces, and small cases worked by hand."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from conftest import REFERENCE, TRACES, ingest_directly, table_rows
from pipelines.analysis import critical_path
from pipelines.read.kineto.fields import MAX_PLAUSIBLE_DUR_NS
from pipelines.warehouse import sql
from pipelines.warehouse.store import Warehouse

HTA = json.loads((REFERENCE / "hta_0.6.1_critical_path.json").read_text())["traces"]
SHARE_POINTS = 2.0  # the bar: each of HTA's categories within 2 points of its share
LENGTH_SHARE = 0.01  # and the path's length within 1 %


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Warehouse:
    store = Warehouse(tmp_path_factory.mktemp("critical-path") / "warehouse")
    store.ensure()
    for name in HTA:
        ingest_directly(store, TRACES / "hta_critical_path" / name, name)
    ingest_directly(store, TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz", "no_sync")
    return store


def hta_shares(name: str) -> tuple[float, dict[str, float]]:
    reference = HTA[name]
    return reference["critical_path_us"] * 1000, {k: v for k, v in reference["bound_by_percent"].items() if v}


def assert_agrees(name: str, length_ns: float, by_bound: dict[str, float]) -> None:
    hta_length, hta = hta_shares(name)
    ours = {bound: 100 * ns / length_ns for bound, ns in by_bound.items() if ns}
    print(f"{name}: {length_ns / 1000:.0f} us (HTA {hta_length / 1000:.0f}), "
          + ", ".join(f"{b} {ours.get(b, 0):.2f} % (HTA {hta.get(b, 0):.2f})" for b in sorted(set(ours) | set(hta))))
    assert abs(length_ns / hta_length - 1) <= LENGTH_SHARE
    assert all(abs(ours.get(b, 0) - hta.get(b, 0)) <= SHARE_POINTS for b in set(ours) | set(hta)), (ours, hta)


def test_a_step_agrees_with_hta(store):
    """cuda_event_sync: HTA's reference is its step ProfilerStep#100 (event syncs on the CPU)."""
    rows = table_rows(store, "SELECT hta_bound, sum(path_ns) AS ns, any_value(sync_recorded) AS synced "
                             "FROM step_critical_path WHERE run_id = 'cuda_event_sync' AND step = 100 GROUP BY hta_bound")
    by_bound = {row["hta_bound"]: row["ns"] for row in rows}
    assert all(row["synced"] for row in rows)
    assert_agrees("cuda_event_sync", sum(by_bound.values()), by_bound)


def test_a_device_trace_without_sync_events_still_has_a_path(store):
    """HTA's DDP trace records no `cuda_sync` events: each of its steps still has a path, through
    the launches and kernels the trace shows, and says the waits are missing."""
    rows = table_rows(store, "SELECT step, sum(path_ns) AS ns, bool_or(sync_recorded) AS synced, "
                             "sum(path_ns) FILTER (WHERE part = 'launch and cpu overhead') AS overhead "
                             "FROM step_critical_path WHERE run_id = 'no_sync' GROUP BY step ORDER BY step")
    steps = table_rows(store, "SELECT step, step_ns FROM step_breakdown WHERE run_id = 'no_sync' ORDER BY step")
    assert [row["step"] for row in rows] == [row["step"] for row in steps] == [4, 5, 6]
    assert all(row["synced"] is False and 0 < row["overhead"] < row["ns"] for row in rows)
    assert all(0 < row["ns"] <= step["step_ns"] for row, step in zip(rows, steps))


def test_the_graph_holds_the_waits_the_trace_records(store):
    """cuda_event_sync's step: the event synchronisation and query wait for the spin kernel
    launched before the recorded event, the stream synchronisation for the copy before it."""
    waits = {(row["from_node"], row["to_node"]) for row in table_rows(
        store, "SELECT from_node, to_node FROM step_dependencies "
               "WHERE run_id = 'cuda_event_sync' AND step = 100 AND dependency = 'dependency' AND weight_ns = 0")}
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long) end"
    assert {(spin, "cudaEventSynchronize end"), (spin, "cudaEventQuery end"), (spin, "cudaDeviceSynchronize end"),
            ("Memcpy DtoH (Device -> Pageable) end", "cudaStreamSynchronize end")} <= waits


@pytest.mark.parametrize("name", ["simple_add", "cuda_event_sync_multi_stream"])
def test_a_whole_trace_agrees_with_hta(store, name):
    """HTA's reference for these is the whole trace (they have no ProfilerStep): the same graph
    over the trace's span, from the run's parsed events, its path sorted by step_critical_path's SQL."""
    con = store.connect()
    try:
        sql.set_variables(con, max_dur_ns=MAX_PLAUSIBLE_DUR_NS, run=name, run_id=name, critical_from_ns=[0],
                          critical_to_ns=[2**62])
        con.execute("CREATE TEMP VIEW run_events AS FROM trace_events WHERE run_id = getvariable('run')")
        events = con.sql(critical_path.EVENTS_QUERY.replace("FROM trace_events", "FROM run_events")).to_arrow_table()
        rank = events.column("rank")[0].as_py()
        span = con.execute("SELECT min(ts_ns), max(ts_ns + dur_ns) FROM run_events").fetchall()[0]
        path, _ = critical_path.critical_paths(events, {rank: [(0, *span)]}, pa.table({"step": pa.array([], pa.int64())}))
        con.register(critical_path.TABLE, path)
        rows = con.execute(f"SELECT hta_bound, sum(path_ns) FROM ({sql.table('step_critical_path').query}) GROUP BY ALL").fetchall()
    finally:
        con.close()
    by_bound = dict(rows)
    assert_agrees(name, sum(by_bound.values()), by_bound)


def events(rows: list[dict]) -> critical_path.Events:
    """Events from rows in microseconds; what a row leaves out takes a default."""
    defaults = {"cat": "cpu_op", "tid": "1", "stream": None, "correlation": None, "wait_on_stream": None,
                "wait_on_correlation": None}
    full = [{**defaults, **row} for row in rows]
    table = pa.table({
        "cat": [r["cat"] for r in full], "name": [r["name"] for r in full],
        "ts_ns": [r["ts"] * 1000 for r in full], "dur_ns": [r["dur"] * 1000 for r in full],
        "tid": [r["tid"] for r in full], "stream": pa.array([r["stream"] for r in full], pa.int64()),
        "correlation": pa.array([r["correlation"] for r in full], pa.int64()),
        "wait_on_stream": pa.array([r["wait_on_stream"] for r in full], pa.int64()),
        "wait_on_correlation": pa.array([r["wait_on_correlation"] for r in full], pa.int64()),
        "on_device": [r["cat"] == "kernel" for r in full],
    })
    return critical_path.Events.of(table)


def path_of(rows: list[dict]) -> list[tuple[str, str | None, int]]:
    e = events(rows)
    path = critical_path.longest_path(critical_path.RankGraph(e).window(0, int(e.ts.max())))
    return [(edge.kind, e.name[edge.event] if edge.event >= 0 else None, edge.weight // 1000) for edge in path]


LAUNCH_THEN_SYNC = [
    {"name": "forward", "ts": 0, "dur": 10},
    {"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": 2, "dur": 2, "correlation": 1},
    {"name": "gemm", "cat": "kernel", "ts": 6, "dur": 40, "stream": 7, "correlation": 1, "tid": "7"},
    {"name": "cudaDeviceSynchronize", "cat": "cuda_runtime", "ts": 12, "dur": 40, "correlation": 2},
]


def test_a_blocking_call_is_the_kernel_it_waited_for():
    """forward (0-10 us) launches gemm at 2 us (on the device 6-46); cudaDeviceSynchronize
    (12-52) waits for it. The path: forward up to the launch, the launch's delay, the kernel, then
    the wait's end (the Context Sync says what it waited for); the call's own 40 us are not CPU
    time."""
    synced = LAUNCH_THEN_SYNC + [{"name": "Context Sync", "cat": "cuda_sync", "ts": 12, "dur": 40, "correlation": 2,
                                   "tid": "-1", "stream": -1}]
    assert path_of(synced) == [("operator", "forward", 2), ("launch", None, 4), ("operator", "gemm", 40),
                               ("dependency", None, 0)]


def test_without_sync_events_the_wait_is_unseen():
    """The same without the trace's cuda_sync event: nothing ties the wait's end to the kernel, so
    the path ends with the kernel, and no CPU time is added for the wait."""
    assert path_of(LAUNCH_THEN_SYNC) == [("operator", "forward", 2), ("launch", None, 4), ("operator", "gemm", 40)]


def test_a_stream_waits_for_the_recorded_event():
    """Kernel a (stream 7, 5-25 us) is recorded as an event; stream 8 waits for it, so kernel b,
    launched at 6 us, starts at 26 after a ends: the path runs through a, then b."""
    rows = [
        {"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": 1, "dur": 1, "correlation": 1},
        {"name": "a", "cat": "kernel", "ts": 5, "dur": 20, "stream": 7, "correlation": 1, "tid": "7"},
        {"name": "cudaEventRecord", "cat": "cuda_runtime", "ts": 3, "dur": 1, "correlation": 2},
        {"name": "cudaStreamWaitEvent", "cat": "cuda_runtime", "ts": 4, "dur": 1, "correlation": 3},
        {"name": "Stream Wait Event", "cat": "cuda_sync", "ts": 4, "dur": 1, "correlation": 3, "stream": 8,
         "wait_on_stream": 7, "wait_on_correlation": 2, "tid": "8"},
        {"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ts": 6, "dur": 1, "correlation": 4},
        {"name": "b", "cat": "kernel", "ts": 26, "dur": 10, "stream": 8, "correlation": 4, "tid": "8"},
    ]
    assert path_of(rows) == [("launch", None, 4), ("operator", "a", 20), ("dependency", None, 0), ("operator", "b", 10)]
    # Without the wait, b's 20 us from its launch to its start read as its launch delay, reached
    # through the CPU's calls before it.
    assert path_of([r for r in rows if r["name"] != "Stream Wait Event"])[-2:] == [("launch", None, 20), ("operator", "b", 10)]


def test_a_large_run_gets_each_ranks_median_step():
    """Above the budget of events, one step per rank, its median-length one, for the ranks whose
    steps' events (estimated over the rank's span) fit; the events read run from it to as long
    again after it (the kernels it launched)."""
    steps = pa.table({"rank": [0, 0, 0, 1, 1, 2], "step": [1, 2, 3, 1, 2, 1],
                      "start_ns": [0, 100, 250, 0, 100, 0], "end_ns": [100, 250, 300, 90, 180, 100]})
    events = {0: 300, 1: 180, 2: 100}
    everything = critical_path.chosen_windows(steps, events, budget=580)
    assert everything[0] == [(1, 0, 100), (2, 100, 250), (3, 250, 300)] and len(everything) == 3
    # Rank 0's median step holds about 100 events, rank 1's 80, rank 2's 100: two ranks fit in 200.
    chosen = critical_path.chosen_windows(steps, events, budget=200)
    assert chosen == {0: [(1, 0, 100)], 1: [(2, 100, 180)]}
    assert critical_path.spans(chosen) == {"critical_from_ns": [0, 100], "critical_to_ns": [200, 260]}
    assert critical_path.chosen_windows(steps, events, budget=10) == {0: [(1, 0, 100)]}


def test_a_rank_waits_for_a_late_rank_through_its_chain():
    """Two gloo ranks all-reduce once. Rank 0 starts its step at 5 ms, computes until 10 and issues
    the all-reduce; rank 1 computes 0-30 and issues it at 30; the collective begins at 31 and ends
    at 71 on both; each then computes 10 ms more. Rank 0's path is rank 1's chain up to the begin
    (the longer: 31 ms against rank 0's 6 and its 20 ms wait), the transfer, then its own work;
    rank 1's is its own throughout. Had rank 0 started at 0, its own chain and wait (31 ms) would
    tie with rank 1's, and its path would keep to itself."""
    ms = 1000  # rows are in microseconds
    graphs, windows, instances = {}, {}, []
    for rank, begin, compute in ((0, 5, 5), (1, 0, 30)):
        rows = [
            {"name": "forward", "ts": begin * ms, "dur": compute * ms},
            {"name": "c10d::allreduce_", "ts": (begin + compute) * ms, "dur": 100},
            {"name": "optimizer", "ts": 72 * ms, "dur": 10 * ms},
        ]
        graphs[rank] = critical_path.RankGraph(events(rows))
        windows[rank] = (begin * ms * 1000, 90 * ms * 1000)
        instances.append(critical_path.Instance(rank, "c", (begin + compute + 1) * ms * 1000, 71 * ms * 1000,
                                                31 * ms * 1000, "gloo:all_reduce", -1, False))
    edges = critical_path.step_graph(graphs, windows, instances)
    paths = {rank: [(edge.kind, edge.rank, edge.weight // 1_000_000) for edge in critical_path.longest_path(edges, rank)
                    if edge.weight] for rank in (0, 1)}
    assert paths[0] == [("operator", 1, 30), ("issue", 1, 1), ("transfer", 0, 40), ("operator", 0, 10)]
    assert paths[1] == [("operator", 1, 30), ("issue", 1, 1), ("transfer", 1, 40), ("operator", 1, 10)]


def test_times_stay_exact_to_the_nanosecond():
    """Nanoseconds since the epoch are past a double's precision: a collective's kernel is found by
    its exact start, and by its stream where two groups' kernels of one name start together."""
    start_ns = 1_716_423_322_416_788_067
    none = pa.array([None, None], pa.int64())
    table = pa.table({"cat": ["kernel"] * 2, "name": ["k"] * 2, "ts_ns": pa.array([start_ns] * 2, pa.int64()),
                      "dur_ns": [5, 9], "tid": ["7", "9"], "stream": pa.array([7, 9], pa.int64()), "correlation": none,
                      "wait_on_stream": none, "wait_on_correlation": none, "on_device": [True] * 2})
    graph = critical_path.RankGraph(critical_path.Events.of(table))
    first = graph.device_event(start_ns, "k", 7)
    assert int(graph.e.ts[first]) == start_ns and int(graph.e.correlation[first]) == -1
    assert [int(graph.e.dur[graph.device_event(start_ns, "k", stream)]) for stream in (7, 9)] == [5, 9]
