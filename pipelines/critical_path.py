"""The critical path of each step on one rank: the longest chain of dependencies the trace records.

The graph is HTA's (`critical_path_analysis`, HTA 0.6), so that its answers can be set side by side
with HTA's: every CPU operator, runtime call and device event is two nodes, its start and its end,
joined by an edge as long as the event. Edges, each weighing the time from its source to its end:

* on each CPU thread, operators in the order a depth-first walk of their nesting meets their starts
  and ends; between top-level operators a zero edge (the thread's idle time is on no path);
* a blocking synchronisation call (`cudaDeviceSynchronize`, `cudaStreamSynchronize`,
  `cudaEventQuery`, `cudaEventSynchronize`, `cudaMemcpy`, `cudaMemcpyAsync`) weighs nothing itself:
  its time is the device's, reached by a zero edge from what it waited for, as the trace's
  `cuda_sync` events say (the last kernel of the stream, of every stream, or the one launched
  before the `cudaEventRecord` it waits on);
* a kernel follows its launch (the launch delay) when its stream was empty and idle at the launch,
  else the kernel before it on its stream (the gap between them);
* a `Stream Wait Event` makes the next kernel launched on its stream wait for the kernel launched
  before the recorded event on the other stream (a zero edge).

The longest path through that graph, over the step's window (CPU events that start in it, and
device events whose launch does), is its critical path; each of its edges is attributed to the
event it lies in (`sql/step_critical_path.sql` sorts them into parts, and HTA's categories).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipelines import sql

STEP = "_critical_path_step"
TABLE = "_critical_path_edges"

RELEVANT = """ph = 'X' AND ts_ns IS NOT NULL AND dur_ns >= 0 AND dur_ns <= getvariable('max_dur_ns')
  AND (cat IN ('cpu_op', 'cuda_runtime', 'cuda_driver', 'cuda_sync') OR is_device_event(cat))"""
COUNT_QUERY = f"SELECT count(*) FROM trace_events WHERE {RELEVANT}"
STEPS_QUERY = "SELECT rank, step, start_ns, end_ns FROM steps ORDER BY rank, step"
# The events of each rank's span to read (`critical_from_ns` and `critical_to_ns`, lists by rank).
EVENTS_QUERY = f"""
SELECT rank, cat, name, ts_ns, dur_ns, tid, stream, correlation, wait_on_stream, wait_on_correlation,
  is_device_event(cat) AS on_device
FROM trace_events
WHERE {RELEVANT} AND rank < len(getvariable('critical_from_ns'))
  AND ts_ns BETWEEN getvariable('critical_from_ns')[rank + 1] AND getvariable('critical_to_ns')[rank + 1]
ORDER BY rank, ts_ns, dur_ns DESC
"""
QUERIES = (COUNT_QUERY, STEPS_QUERY, EVENTS_QUERY)
# A run with more events than this (of the kinds the graph reads) gets the path of one step per
# rank, its median-length step, as HTA gives one step at a time: the graph is walked in Python, at
# about 25 us an event on the machine the tests run on (5 s for this many).
MAX_EVENTS_ALL_STEPS = 200_000

NODE_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")
BLOCKING_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpyAsync",
})
LAUNCH_CALLS = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "hipLaunchKernel",
    "hipExtModuleLaunchKernel", "hipMemcpyAsync", "hipMemsetAsync", "hipMemcpyWithStream",
})
OPERATOR, LAUNCH, KERNEL_GAP, DEPENDENCY = "operator", "launch", "kernel gap", "dependency"
COLUMNS = {
    "rank": pa.int32(), "step": pa.int64(), "edge": pa.string(), "weight_ns": pa.int64(), "event_cat": pa.string(),
    "event_name": pa.string(), "event_ts_ns": pa.int64(), "on_device": pa.bool_(),
}


@dataclass
class Events:
    """One rank's events, as columns; an event is its index."""

    cat: list[str]
    name: list[str]
    ts: np.ndarray
    dur: np.ndarray
    tid: list[str]
    stream: np.ndarray  # -1 where none
    correlation: np.ndarray  # -1 where none
    wait_on_stream: np.ndarray
    wait_on_correlation: np.ndarray
    on_device: np.ndarray

    @classmethod
    def of(cls, table: pa.Table) -> Events:
        """The table's events in time order (the longer first where two start together)."""
        table = table.sort_by([("ts_ns", "ascending"), ("dur_ns", "descending")])

        def ints(name: str) -> np.ndarray:
            return np.nan_to_num(table.column(name).to_numpy(zero_copy_only=False).astype(float), nan=-1).astype(np.int64)

        return cls(
            table.column("cat").to_pylist(), table.column("name").to_pylist(), ints("ts_ns"), ints("dur_ns"),
            table.column("tid").to_pylist(), ints("stream"), ints("correlation"), ints("wait_on_stream"),
            ints("wait_on_correlation"), table.column("on_device").to_numpy(zero_copy_only=False).astype(bool),
        )

    def end(self, i: int) -> int:
        return int(self.ts[i] + self.dur[i])


@dataclass(frozen=True)
class Edge:
    source: int  # node ids: 2 i is event i's start, 2 i + 1 its end
    target: int
    kind: str
    weight: int
    event: int  # the event the edge's time is attributed to; -1: none


class RankGraph:
    """What one rank's whole trace says, for its steps' graphs: which kernel each launch launched,
    how many launches were outstanding on a stream at each launch and kernel start (HTA's queue
    length), and the kernel each recorded CUDA event and each stream wait stand for."""

    def __init__(self, events: Events):
        self.e = events
        n = len(events.ts)
        device_of: dict[int, int] = {}  # correlation -> device event
        self.sync_events = [i for i in range(n) if events.cat[i] == "cuda_sync"]
        runtime_of: dict[int, int] = {}  # correlation -> runtime call
        for i in range(n):
            c = int(events.correlation[i])
            if c < 0:
                continue
            if events.on_device[i]:
                device_of[c] = i
            elif events.cat[i] in ("cuda_runtime", "cuda_driver"):
                runtime_of[c] = i
        self.runtime_of = runtime_of
        self.launch_of: dict[int, int] = {}  # device event -> its launch
        self.kernel_of: dict[int, int] = {}  # launch -> its device event
        launches = []
        for c, k in device_of.items():
            r = runtime_of.get(c)
            if r is not None:
                self.launch_of[k] = r
                self.kernel_of[r] = k
                if events.name[r] in LAUNCH_CALLS:
                    launches.append((r, k))
        self._queue_lengths(launches)
        self._recorded_kernels(launches)
        self._stream_waits(launches)

    def _queue_lengths(self, launches: list[tuple[int, int]]) -> None:
        """Per stream: +1 at each launch, -1 at each launched kernel's start, in time order."""
        e = self.e
        changes: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for r, k in launches:
            changes[int(e.stream[k])] += [(int(e.ts[r]), 0, r), (int(e.ts[k]), 1, k)]
        self.queue: dict[int, int] = {}
        for stream_changes in changes.values():
            length = 0
            for _, kind, i in sorted(stream_changes):
                length += 1 if kind == 0 else -1
                self.queue[i] = length

    def _recorded_kernels(self, launches: list[tuple[int, int]]) -> None:
        """The kernel each `cudaEventRecord` (by correlation) stands for: the last one launched on the
        recorded stream before the record."""
        e = self.e
        recorded_stream = {int(e.wait_on_correlation[i]): int(e.wait_on_stream[i]) for i in self.sync_events
                           if e.wait_on_correlation[i] >= 0}
        by_stream: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for r, k in launches:
            by_stream[int(e.stream[k])].append((int(e.ts[r]), k))
        for launched in by_stream.values():
            launched.sort()
        self.recorded_kernel: dict[int, int] = {}
        for correlation, stream in recorded_stream.items():
            record = self.runtime_of.get(correlation)
            launched = by_stream.get(stream, [])
            if record is None or not launched:
                continue
            at = np.searchsorted([t for t, _ in launched], int(e.ts[record]), side="right")
            if at > 0:
                self.recorded_kernel[correlation] = launched[at - 1][1]

    def _stream_waits(self, launches: list[tuple[int, int]]) -> None:
        """For each `Stream Wait Event`: the next kernel launched on its stream from the thread that
        called `cudaStreamWaitEvent`, which waits for the recorded kernel."""
        e = self.e
        by_thread_stream: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        for r, k in launches:
            by_thread_stream[(e.tid[r], int(e.stream[k]))].append((int(e.ts[r]), k))
        for launched in by_thread_stream.values():
            launched.sort()
        self.waits_for: dict[int, int] = {}  # kernel -> the kernel it waits for
        for i in self.sync_events:
            if e.name[i] != "Stream Wait Event":
                continue
            call = self.runtime_of.get(int(e.correlation[i]))
            source = self.recorded_kernel.get(int(e.wait_on_correlation[i]))
            if call is None or source is None:
                continue
            launched = by_thread_stream.get((e.tid[call], int(e.stream[i])), [])
            at = np.searchsorted([t for t, _ in launched], int(e.ts[call]), side="right")
            if at < len(launched):
                self.waits_for[launched[at][1]] = source

    def window(self, start_ns: int, end_ns: int) -> list[Edge]:
        """The graph of the events in a window: CPU events that start in it, device events whose
        launch does, and the synchronisation events that start in it."""
        e = self.e
        first, last = int(np.searchsorted(e.ts, start_ns, side="left")), int(np.searchsorted(e.ts, end_ns, side="right"))
        cpu = [i for i in range(first, last) if not e.on_device[i] and e.dur[i] > 0 and e.cat[i] in NODE_CATEGORIES]
        members = set(cpu)
        kernels = [self.kernel_of[r] for r in cpu if r in self.kernel_of]
        members.update(kernels)
        edges = self._cpu_edges(cpu)
        edges += self._device_edges(kernels, members, start_ns, end_ns)
        return edges

    def _cpu_edges(self, cpu: list[int]) -> list[Edge]:
        """Each thread's operators walked depth first (HTA's call stacks)."""
        e = self.e
        by_thread: dict[str, list[int]] = defaultdict(list)
        for i in cpu:
            by_thread[e.tid[i]].append(i)
        edges: list[Edge] = []
        for ops in by_thread.values():
            ops.sort(key=lambda i: (e.ts[i], -e.dur[i]))
            walk: list[tuple[int, bool, int]] = []  # (event, entering, its parent)
            stack: list[int] = []
            for i in ops:
                while stack and e.end(stack[-1]) <= e.ts[i]:
                    done = stack.pop()
                    walk.append((done, False, stack[-1] if stack else -1))
                walk.append((i, True, stack[-1] if stack else -1))
                stack.append(i)
            while stack:
                done = stack.pop()
                walk.append((done, False, stack[-1] if stack else -1))
            edges += self._walk_edges(walk)
        return edges

    def _walk_edges(self, walk: list[tuple[int, bool, int]]) -> list[Edge]:
        e = self.e
        edges: list[Edge] = []
        last: int | None = None  # node
        last_parent = -1
        last_top: int | None = None
        depth = 0
        for i, entering, parent in walk:
            node = 2 * i if entering else 2 * i + 1
            if entering:
                if depth == 0 and last_top is not None:
                    edges.append(Edge(last_top, node, DEPENDENCY, 0, -1))
                depth += 1
                if last is not None:
                    edges.append(self._operator_edge(last, node, last_parent, blocking=False))
            else:
                depth -= 1
                if last is not None:
                    edges.append(self._operator_edge(last, node, last_parent, blocking=e.name[i] in BLOCKING_CALLS))
            if not entering and depth == 0:
                last, last_top = None, node
            else:
                last, last_parent = node, parent
        return edges

    def _operator_edge(self, source: int, target: int, source_parent: int, blocking: bool) -> Edge:
        """An edge along a thread, attributed as HTA does: to the event it starts in, or ends in,
        or, from one child's end to the next child's start, to their parent."""
        if source % 2 == 0:
            event = source // 2
        elif target % 2 == 1:
            event = target // 2
        else:
            event = source_parent
        weight = 0 if blocking else max(0, self._time(target) - self._time(source))
        return Edge(source, target, OPERATOR, weight, event)

    def _time(self, node: int) -> int:
        i = node // 2
        return int(self.e.ts[i]) if node % 2 == 0 else self.e.end(i)

    def _device_edges(self, kernels: list[int], members: set[int], start_ns: int, end_ns: int) -> list[Edge]:
        """Kernels in order on each stream, with their launches, gaps and synchronisations."""
        e = self.e
        syncs = [i for i in self.sync_events if e.name[i] == "Stream Wait Event"
                 or (start_ns <= e.ts[i] <= end_ns and e.dur[i] > 0)]
        order = sorted([(int(e.ts[k]), k) for k in kernels] + [(e.end(i), i) for i in syncs])
        last: dict[int, int] = {}  # stream -> its last kernel
        edges: list[Edge] = []
        for _, i in order:
            if e.cat[i] == "cuda_sync":
                edges += self._sync_edges(i, last, members)
                continue
            stream, launch = int(e.stream[i]), self.launch_of[i]
            edges.append(Edge(2 * i, 2 * i + 1, OPERATOR, int(e.dur[i]), i))
            source = self.waits_for.get(i)
            if source is not None and source not in members:
                source = None
            if source is not None:
                edges.append(Edge(2 * source + 1, 2 * i, DEPENDENCY, 0, -1))
            previous = last.get(stream)
            launched_ns = int(e.ts[launch])
            if (self.queue.get(launch) == 1 and self.queue.get(i) == 0
                    and (previous is None or e.end(previous) < launched_ns)
                    and (source is None or e.end(source) < launched_ns) and launch in members):
                edges.append(Edge(2 * launch, 2 * i, LAUNCH, max(0, int(e.ts[i]) - launched_ns), -1))
            elif previous is not None and (source is None or e.end(source) < e.end(previous)):
                edges.append(Edge(2 * previous + 1, 2 * i, KERNEL_GAP, max(0, int(e.ts[i]) - e.end(previous)), previous))
            last[stream] = i
        return edges

    def _sync_edges(self, i: int, last: dict[int, int], members: set[int]) -> list[Edge]:
        """A CPU call that waited for the device ends no earlier than what it waited for."""
        e = self.e
        call = self.runtime_of.get(int(e.correlation[i]))
        name = e.name[i]
        if name == "Stream Wait Event" or call is None or call not in members:
            return []
        if name == "Event Sync":
            waited = [self.recorded_kernel.get(int(e.wait_on_correlation[i]))]
        elif name == "Context Sync":
            waited = list(last.values())
        else:  # Stream Sync
            waited = [last.get(int(e.stream[i]))]
        return [Edge(2 * k + 1, 2 * call + 1, DEPENDENCY, 0, -1) for k in waited if k is not None and k in members]


def longest_path(edges: list[Edge]) -> list[Edge]:
    """The heaviest chain of edges (the graph has no cycle: every edge runs forward in time, or
    ties). Kahn's order, then the best predecessor of each node."""
    successors: dict[int, list[Edge]] = defaultdict(list)
    indegree: dict[int, int] = defaultdict(int)
    nodes: set[int] = set()
    for edge in edges:
        successors[edge.source].append(edge)
        indegree[edge.target] += 1
        nodes.update((edge.source, edge.target))
    ready = sorted(n for n in nodes if indegree[n] == 0)
    best: dict[int, tuple[int, Edge | None]] = {n: (0, None) for n in ready}
    while ready:
        node = ready.pop()
        length = best[node][0]
        for edge in successors[node]:
            candidate = length + edge.weight
            if edge.target not in best or candidate > best[edge.target][0]:
                best[edge.target] = (candidate, edge)
            indegree[edge.target] -= 1
            if indegree[edge.target] == 0:
                ready.append(edge.target)
    if not best:
        return []
    node = max(best, key=lambda n: (best[n][0], n))
    path: list[Edge] = []
    while best[node][1] is not None:
        edge = best[node][1]
        path.append(edge)
        node = edge.source
    return path[::-1]


def chosen_windows(steps: pa.Table, all_steps: bool) -> dict[int, list[tuple[int, int, int]]]:
    """Per rank, the steps whose paths are found: all of them, or its median-length one."""
    windows: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for rank, step, start, end in zip(*(steps.column(c).to_pylist() for c in ("rank", "step", "start_ns", "end_ns"))):
        windows[rank].append((step, start, end))
    if not all_steps:
        for rank, rank_windows in windows.items():
            by_length = sorted(rank_windows, key=lambda w: (w[2] - w[1], w[0]))
            windows[rank] = [by_length[(len(by_length) - 1) // 2]]
    return windows


def spans(windows: dict[int, list[tuple[int, int, int]]]) -> dict[str, list[int]]:
    """The variables of EVENTS_QUERY: per rank, from its first chosen step's start to its last's end,
    and as long again after it (the kernels its last step launched run on after it ends)."""
    size = max(windows, default=-1) + 1
    start, end = [0] * size, [-1] * size
    for rank, rank_windows in windows.items():
        _, last_start, last_end = max(rank_windows, key=lambda w: w[2])
        start[rank] = min(w[1] for w in rank_windows)
        end[rank] = last_end + (last_end - last_start)
    return {"critical_from_ns": start, "critical_to_ns": end}


def critical_paths(events: pa.Table, windows: dict[int, list[tuple[int, int, int]]]) -> pa.Table:
    """Each chosen step's critical path on its rank: one row per edge on it."""
    rows: dict[str, list] = {name: [] for name in COLUMNS}
    ranks = events.column("rank").to_numpy(zero_copy_only=False)
    for rank, rank_windows in windows.items():
        chosen = np.flatnonzero(ranks == rank)
        if not len(chosen):
            continue
        rank_events = Events.of(events.take(pa.array(chosen)))
        graph = RankGraph(rank_events)
        for step, start, end in rank_windows:
            for edge in longest_path(graph.window(start, end)):
                event = edge.event if edge.event >= 0 else None
                rows["rank"].append(rank)
                rows["step"].append(step)
                rows["edge"].append(edge.kind)
                rows["weight_ns"].append(edge.weight)
                rows["event_cat"].append(None if event is None else rank_events.cat[event])
                rows["event_name"].append(None if event is None else rank_events.name[event])
                rows["event_ts_ns"].append(None if event is None else int(rank_events.ts[event]))
                rows["on_device"].append(None if event is None else bool(rank_events.on_device[event]))
    return pa.table({name: pa.array(values, type=COLUMNS[name]) for name, values in rows.items()})


def register(con) -> None:
    """Build TABLE in the session: the edges of the chosen steps' critical paths."""
    ((count,),) = con.execute(COUNT_QUERY).fetchall()
    windows = chosen_windows(con.sql(STEPS_QUERY).to_arrow_table(), count <= MAX_EVENTS_ALL_STEPS)
    sql.set_variables(con, **spans(windows))
    found = critical_paths(con.sql(EVENTS_QUERY).to_arrow_table(), windows)
    con.register("_critical_found", found)
    try:
        con.execute(f'CREATE OR REPLACE TABLE "{TABLE}" AS SELECT * FROM _critical_found').fetchall()
    finally:
        con.unregister("_critical_found")
