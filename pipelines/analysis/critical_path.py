"""The critical path of each step on one rank: the longest chain of dependencies the trace records.

The graph is HTA's (`critical_path_analysis`, HTA 0.6), so that its answers can be set side by side
with HTA's: every CPU operator, runtime call and device event is two nodes, its start and its end,
joined by an edge as long as the event. Edges, each weighing the time from its source to its end:

* on each CPU thread, operators in the order a depth-first walk of their nesting meets their starts
  and ends; between top-level operators a zero edge (the thread's idle time is on no path), but on
  a rank without device events the time between them (the training loop's own);
* a blocking synchronisation call (`cudaDeviceSynchronize`, `cudaStreamSynchronize`,
  `cudaEventQuery`, `cudaEventSynchronize`, `cudaMemcpy`, `cudaMemcpyAsync`) weighs nothing itself:
  its time is the device's, reached by a zero edge from what it waited for, as the trace's
  `cuda_sync` events say (the last kernel of the stream, of every stream, or the one launched
  before the `cudaEventRecord` it waits on);
* a kernel follows its launch (the launch delay) when its stream was empty and idle at the launch,
  else the kernel before it on its stream (the gap between them);
* a `Stream Wait Event` makes the next kernel launched on its stream wait for the kernel launched
  before the recorded event on the other stream (a zero edge).

A step's graph joins its ranks' graphs, each over the rank's window (CPU events that start in it,
device events whose launch does), by the step's collectives (`step_graph`). The longest path
ending on a rank is its critical path for the step; each of its edges is attributed to an event
(`sql/step_critical_path.sql` sorts them into parts, and HTA's categories).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.warehouse import sql

STEP = "_critical_path_step"
TABLE = "_critical_path_edges"  # every step's path on each rank, edge by edge
GRAPH_TABLE = "_critical_graph_edges"  # every step's graph: the dependencies its traces record

RELEVANT = """ph = 'X' AND ts_ns IS NOT NULL AND dur_ns >= 0 AND dur_ns <= getvariable('max_dur_ns')
  AND (cat IN ('cpu_op', 'cuda_runtime', 'cuda_driver', 'cuda_sync') OR is_device_event(cat))"""
COUNT_QUERY = f"SELECT rank, count(*) AS events FROM trace_events WHERE {RELEVANT} GROUP BY rank"
STEPS_QUERY = "SELECT rank, step, start_ns, end_ns FROM steps ORDER BY rank, step"
# The events of each rank's span to read (`critical_from_ns` and `critical_to_ns`, lists by rank);
# the first test, on constants, lets the scan skip row groups outside every span.
EVENTS_QUERY = f"""
SELECT rank, cat, name, ts_ns, dur_ns, tid, stream, correlation, wait_on_stream, wait_on_correlation,
  is_device_event(cat) AS on_device
FROM trace_events
WHERE ts_ns BETWEEN list_min(getvariable('critical_from_ns')) AND list_max(getvariable('critical_to_ns'))
  AND {RELEVANT} AND rank < len(getvariable('critical_from_ns'))
  AND ts_ns BETWEEN getvariable('critical_from_ns')[rank + 1] AND getvariable('critical_to_ns')[rank + 1]
ORDER BY rank, ts_ns, dur_ns DESC
"""
# Each rank's part in each collective of a step, and when its last rank arrived.
INSTANCES_QUERY = """
SELECT c.rank, c.step, c.collective_key AS key, c.start_ns, c.end_ns, s.last_start_ns AS begin_ns,
  coalesce(c.kernel, '') AS kernel, coalesce(c.stream, -1) AS stream, c.timeline = 'device' AS on_device
FROM collectives AS c
JOIN collective_sync AS s USING (collective_key)
WHERE c.step IS NOT NULL AND c.end_ns >= c.start_ns AND s.last_start_ns IS NOT NULL
"""
QUERIES = (COUNT_QUERY, STEPS_QUERY, EVENTS_QUERY, INSTANCES_QUERY)
# A run with more events than this (of the kinds the graph reads) gets the path of one step per
# rank, its median-length step, as HTA gives one step at a time, for as many ranks (in order) as
# their steps' events, estimated from each rank's events over its steps' span, stay within it: the
# graph is walked in Python, at about 25 us an event on the machine the tests run on (5 s for this
# many).
MAX_EVENTS_ALL_STEPS = 200_000

# A chain's length, its time on the rank and its edges, packed into one integer (`longest_paths`):
# edges below 2**32, time on the rank below 2**64 ns.
_OWN_SHIFT, _LENGTH_SHIFT = 32, 96

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
ISSUE, WAIT, TRANSFER = "issue", "waiting", "transfer"  # a collective's edges (see step_graph)
BETWEEN = "between operators"  # a CPU timeline's time between top-level operators
COLUMNS = {
    "rank": pa.int32(), "step": pa.int64(), "edge": pa.string(), "weight_ns": pa.int64(), "event_rank": pa.int32(),
    "collective_key": pa.string(), "event_cat": pa.string(), "event_name": pa.string(), "event_ts_ns": pa.int64(),
    "on_device": pa.bool_(),
}


GRAPH_COLUMNS = {
    "step": pa.int64(), "from_rank": pa.int32(), "from_ns": pa.int64(), "from_node": pa.string(), "to_rank": pa.int32(),
    "to_ns": pa.int64(), "to_node": pa.string(), "dependency": pa.string(), "weight_ns": pa.int64(),
    "collective_key": pa.string(), "critical_path_position": pa.int32(),
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

        def ints(name: str) -> np.ndarray:  # exact: nanoseconds since the epoch are past a double's
            return pc.fill_null(table.column(name).cast(pa.int64()), -1).to_numpy()

        def texts(name: str) -> list[str]:  # each distinct text one object: a few hundred names, repeated
            encoded = pc.dictionary_encode(table.column(name)).combine_chunks()
            distinct = encoded.dictionary.to_pylist()
            return [None if index is None else distinct[index] for index in encoded.indices.to_pylist()]

        return cls(
            texts("cat"), texts("name"), ints("ts_ns"), ints("dur_ns"),
            texts("tid"), ints("stream"), ints("correlation"), ints("wait_on_stream"),
            ints("wait_on_correlation"), table.column("on_device").to_numpy(zero_copy_only=False).astype(bool),
        )

    def end(self, i: int) -> int:
        return int(self.ts[i] + self.dur[i])


@dataclass(frozen=True, slots=True)
class Edge:
    source: Hashable  # a rank's own node ids: 2 i is event i's start, 2 i + 1 its end
    target: Hashable
    kind: str
    weight: int
    event: int  # the event of `rank` the edge's time is attributed to; -1: none
    rank: int = -1  # whose time the edge is
    key: str | None = None  # the collective of a wait or a transfer


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
        self._issuers: tuple[np.ndarray, list[int]] | None = None
        self._device_at: dict[tuple[int, str, int], int] | None = None
        # A rank without device events runs on its CPU threads alone: their time between top-level
        # operators is the training loop's own (Python), where on a device timeline it is the CPU's
        # idle time, on no path (HTA's rule).
        self.cpu_timeline = not events.on_device.any()
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
                    edges.append(Edge(last_top, node, BETWEEN, self.time(node) - self.time(last_top), -1)
                                 if self.cpu_timeline else Edge(last_top, node, DEPENDENCY, 0, -1))
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
        weight = 0 if blocking else max(0, self.time(target) - self.time(source))
        return Edge(source, target, OPERATOR, weight, event)

    def time(self, node: int) -> int:
        i = node // 2
        return int(self.e.ts[i]) if node % 2 == 0 else self.e.end(i)

    def device_event(self, start_ns: int, name: str, stream: int) -> int | None:
        """The device event of this name that started then on this stream (a collective's kernel)."""
        if self._device_at is None:
            e = self.e
            self._device_at = {(int(e.ts[i]), e.name[i], int(e.stream[i])): i for i in np.flatnonzero(e.on_device).tolist()}
        return self._device_at.get((start_ns, name, stream))

    def issuer(self, at_ns: int) -> int | None:
        """The latest `c10d::` operator to start at or before a time: the call that issued a
        collective that a worker thread ran."""
        if self._issuers is None:
            calls = [i for i in range(len(self.e.ts)) if self.e.cat[i] == "cpu_op" and self.e.name[i].startswith("c10d::")]
            self._issuers = (np.array([int(self.e.ts[i]) for i in calls], dtype=np.int64), calls)
        times, calls = self._issuers
        at = int(np.searchsorted(times, at_ns, side="right"))
        return calls[at - 1] if at else None

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


def longest_paths(edges: list[Edge], ranks: Iterable[int | None]) -> dict[int | None, list[Edge]]:
    """For each of `ranks`, the heaviest chain of edges ending on its nodes (None: anywhere; the
    graph has no cycle: every edge runs forward in time, or ties). Of chains as heavy, the one with
    most of its time on the rank itself (waits for another rank are on it only where that rank's
    chain was longer), then the one of most edges (a wait's zero edge to its end).

    The graph's order (Kahn's) is found once for all ranks; each rank then takes each node's best
    predecessor in one pass over the edges, its three criteria packed into one integer (length,
    then time on the rank, then edges, in fields that cannot carry into each other), which a
    step of a few hundred thousand edges on eight ranks needs to stay within seconds."""
    ids: dict[Hashable, int] = {}
    source = [ids.setdefault(edge.source, len(ids)) for edge in edges]
    target = [ids.setdefault(edge.target, len(ids)) for edge in edges]
    order, roots = edge_order(source, target, len(ids))
    weights = [max(edge.weight, 0) for edge in edges]
    step = [(weight << _LENGTH_SHIFT) + 1 for weight in weights]
    node_ranks = [node_rank(node) for node in ids]
    paths = {}
    for rank in ranks:
        adds = [add + (weight << _OWN_SHIFT) if edge.rank == rank else add for add, weight, edge in zip(step, weights, edges)]
        best, via = [-1] * len(ids), [-1] * len(ids)
        for node in roots:
            best[node] = 0
        for index in order:
            candidate = best[source[index]] + adds[index]
            if candidate > best[target[index]]:
                best[target[index]] = candidate
                via[target[index]] = index
        ends = [node for node in range(len(ids)) if rank is None or node_ranks[node] == rank]
        path: list[Edge] = []
        if ends:
            node = max(ends, key=best.__getitem__)
            while via[node] >= 0:
                path.append(edges[via[node]])
                node = source[via[node]]
        paths[rank] = path[::-1]
    return paths


def edge_order(source: list[int], target: list[int], nodes: int) -> tuple[list[int], list[int]]:
    """The edges (by index) in an order where every edge into a node comes before every edge out
    of it (Kahn's), and the nodes no edge enters."""
    leaving: list[list[int]] = [[] for _ in range(nodes)]
    indegree = [0] * nodes
    for index, (s, t) in enumerate(zip(source, target)):
        leaving[s].append(index)
        indegree[t] += 1
    roots = [node for node, count in enumerate(indegree) if count == 0]
    ready, order = list(roots), []
    while ready:
        for index in leaving[ready.pop()]:
            order.append(index)
            indegree[target[index]] -= 1
            if indegree[target[index]] == 0:
                ready.append(target[index])
    return order, roots


def longest_path(edges: list[Edge], rank: int | None = None) -> list[Edge]:
    """The heaviest chain of edges ending on `rank`'s nodes (see `longest_paths`)."""
    return longest_paths(edges, [rank])[rank]


def node_rank(node: Hashable) -> int | None:
    """The rank a node of a step's graph belongs to: (rank, own node id), or a collective's node
    on a rank (kind, key, rank); None for a collective's begin ("begin", key, None), which all its
    ranks share."""
    if isinstance(node, tuple):
        return node[0] if len(node) == 2 else node[2]
    return None


@dataclass(frozen=True, slots=True)
class Instance:
    """A rank's part in a collective (a `collectives` row) and when its last rank arrived."""

    rank: int
    key: str
    start_ns: int
    end_ns: int
    begin_ns: int
    kernel: str
    stream: int  # -1 where none
    on_device: bool

    @property
    def kernel_at(self) -> tuple[int, int, str, int]:
        """Where its kernel is: rank, start, name and stream."""
        return self.rank, self.start_ns, self.kernel, self.stream


def step_graph(graphs: dict[int, RankGraph], windows: dict[int, tuple[int, int]], instances: list[Instance]) -> list[Edge]:
    """One step's graph over all its ranks: each rank's own, tied by its collectives. A rank's
    instance waits from its start until the collective begins, when the last rank arrives (the
    `waiting` edge), and transfers from then to its end (`transfer`); the last rank's arrival also
    leads to every rank's begin, so a rank that waited for it has the late rank's chain before its
    transfer where that chain was the longer. On a CPU timeline (gloo) an instance runs on a
    worker thread: it follows its call or the rank's collective before it (`_issue_edges`), and a
    thread that was between operators when it ended was waiting for it (`sql/_activity.sql` reads
    such waits so): the thread's next operator follows the instance's end, and the gap weighs
    nothing itself."""
    edges: list[Edge] = []
    for rank, (start, end) in windows.items():
        edges += [Edge((rank, e.source), (rank, e.target), e.kind, e.weight, e.event, rank)
                  for e in graphs[rank].window(start, end)]
    instances = [x for x in instances if x.rank in windows]
    kernel_at = {x.kernel_at: graphs[x.rank].device_event(x.start_ns, x.kernel, x.stream) for x in instances if x.on_device}
    kernel_at = {at: i for at, i in kernel_at.items() if i is not None}
    kernels = {(x.rank, kernel_at[x.kernel_at]) for x in instances if x.on_device and x.kernel_at in kernel_at}
    edges = [e for e in edges if not (e.kind == OPERATOR and (e.rank, e.event) in kernels and e.source == (e.rank, 2 * e.event))]
    cpu_ends: dict[int, list[tuple[int, Hashable]]] = defaultdict(list)
    last_start: dict[str, int] = defaultdict(int)
    for x in instances:
        last_start[x.key] = max(last_start[x.key], x.start_ns)
    for x in instances:
        kernel = kernel_at.get(x.kernel_at) if x.on_device else None
        if x.on_device and kernel is None:
            continue
        start = (x.rank, 2 * kernel) if x.on_device else ("start", x.key, x.rank)
        end = (x.rank, 2 * kernel + 1) if x.on_device else ("end", x.key, x.rank)
        event = kernel if x.on_device else -1
        begun = max(x.begin_ns, x.start_ns)
        own_begin = ("begun", x.key, x.rank)
        edges.append(Edge(start, own_begin, WAIT, begun - x.start_ns, event, x.rank, x.key))
        edges.append(Edge(("begin", x.key, None), own_begin, DEPENDENCY, 0, -1))
        edges.append(Edge(own_begin, end, TRANSFER, max(0, x.end_ns - begun), event, x.rank, x.key))
        if x.start_ns >= last_start[x.key]:
            edges.append(Edge(start, ("begin", x.key, None), DEPENDENCY, 0, -1, x.rank))
        if not x.on_device:
            cpu_ends[x.rank].append((x.end_ns, end))
    for x in instances:
        if not x.on_device:
            edges += _issue_edges(x, graphs[x.rank], cpu_ends[x.rank])
    return _waits_on_threads(edges, graphs, cpu_ends)


def _issue_edges(x: Instance, graph: RankGraph, ends: list[tuple[int, Hashable]]) -> list[Edge]:
    """A gloo instance starts once the call that issued it has, and once the rank's collective
    that ended last before it has ended, where that came after the call (its worker threads or
    its link were busy): the time from that end to its start is its pickup (`issue`)."""
    start = ("start", x.key, x.rank)
    issued = graph.issuer(x.start_ns)
    issued_ns = int(graph.e.ts[issued]) if issued is not None else None
    before = [(end_ns, node) for end_ns, node in ends if end_ns <= x.start_ns and node != ("end", x.key, x.rank)]
    queued = max(before, key=lambda b: b[0], default=None)
    edges = []
    if queued is not None and (issued_ns is None or queued[0] > issued_ns):
        edges.append(Edge(queued[1], start, ISSUE, x.start_ns - queued[0], -1, x.rank))
        weight = 0
    else:
        weight = x.start_ns - issued_ns if issued_ns is not None else 0
    if issued is not None:
        edges.append(Edge((x.rank, 2 * issued), start, ISSUE, weight, issued, x.rank))
    return edges


def _waits_on_threads(edges: list[Edge], graphs: dict[int, RankGraph], ends: dict[int, list[tuple[int, Hashable]]]) -> list[Edge]:
    """A thread between two operators when a collective ended waited for it: from the end of an
    operator to the next node of its thread, the edge weighs nothing, and the collective's end
    leads to that node."""
    waited: list[Edge] = []
    for index, edge in enumerate(edges):
        rank = edge.rank
        if rank not in ends or not isinstance(edge.source, tuple) or len(edge.source) != 2 or edge.source[1] % 2 == 0 \
                or edge.kind not in (OPERATOR, DEPENDENCY, BETWEEN):
            continue
        graph = graphs[rank]
        after, before = graph.time(edge.source[1]), graph.time(edge.target[1])
        inside = [node for end_ns, node in ends[rank] if after < end_ns <= before]
        if inside:
            edges[index] = replace(edge, weight=0)
            waited += [Edge(node, edge.target, DEPENDENCY, 0, -1, rank) for node in inside]
    return edges + waited


def chosen_windows(steps: pa.Table, events: dict[int, int], budget: int = MAX_EVENTS_ALL_STEPS
                   ) -> dict[int, list[tuple[int, int, int]]]:
    """Per rank, the steps whose paths are found: all of them where the run's `events` (per rank)
    are within the budget; else each rank's median-length step, for the ranks whose steps fit."""
    windows: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for rank, step, start, end in zip(*(steps.column(c).to_pylist() for c in ("rank", "step", "start_ns", "end_ns"))):
        windows[rank].append((step, start, end))
    if sum(events.values()) <= budget:
        return windows
    chosen: dict[int, list[tuple[int, int, int]]] = {}
    spent = 0.0
    for rank in sorted(windows):
        rank_windows = windows[rank]
        step = sorted(rank_windows, key=lambda w: (w[2] - w[1], w[0]))[(len(rank_windows) - 1) // 2]
        span = max(w[2] for w in rank_windows) - min(w[1] for w in rank_windows)
        spent += events.get(rank, 0) * (step[2] - step[1]) / max(span, 1)
        if chosen and spent > budget:
            break
        chosen[rank] = [step]
    return chosen


def spans(windows: dict[int, list[tuple[int, int, int]]]) -> dict[str, list[int]]:
    """The variables of EVENTS_QUERY: per rank, from its first chosen step's start to its last's end,
    and as long again after it (the kernels its last step launched run on after it ends)."""
    size = max(windows, default=-1) + 1
    start, end = [2**62] * size, [-1] * size  # ranks without a chosen step: no span
    for rank, rank_windows in windows.items():
        _, last_start, last_end = max(rank_windows, key=lambda w: w[2])
        start[rank] = min(w[1] for w in rank_windows)
        end[rank] = last_end + (last_end - last_start)
    return {"critical_from_ns": start, "critical_to_ns": end}


def critical_paths(events: pa.Table, windows: dict[int, list[tuple[int, int, int]]], instances: pa.Table
                   ) -> tuple[pa.Table, pa.Table]:
    """Each chosen step's critical path on each of its ranks, across ranks where collectives tie
    them (one row per edge on it), and each step's whole graph (one row per dependency)."""
    rows: dict[str, list] = {name: [] for name in COLUMNS}
    graph_rows: dict[str, list] = {name: [] for name in GRAPH_COLUMNS}
    ranks = events.column("rank").to_numpy(zero_copy_only=False)
    graphs = {}
    for rank in windows:
        chosen = np.flatnonzero(ranks == rank)
        if len(chosen):
            graphs[rank] = RankGraph(Events.of(events.take(pa.array(chosen))))
    by_step: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    for rank, rank_windows in windows.items():
        if rank in graphs:
            for step, start, end in rank_windows:
                by_step[step][rank] = (start, end)
    step_instances: dict[int, list[Instance]] = defaultdict(list)
    # Only the chosen steps' instances: a large run's others are most of them.
    chosen_steps = pa.array(sorted(by_step), type=instances.schema.field("step").type)
    for row in instances.filter(pc.is_in(instances.column("step"), value_set=chosen_steps)).to_pylist():
        step = row.pop("step")
        step_instances[step].append(Instance(**row))
    for step, step_windows in by_step.items():
        edges = step_graph(graphs, step_windows, step_instances.get(step, []))
        paths = longest_paths(edges, step_windows)
        # The step's own critical path: its ranks' longest (the lowest rank of those as long).
        longest = max(sorted(paths), key=lambda rank: sum(edge.weight for edge in paths[rank]))
        positions = {id(edge): position for position, edge in enumerate(paths[longest], 1)}
        _add_graph(graph_rows, step, edges, graphs, step_instances.get(step, []), positions)
        for rank, path in paths.items():
            for edge in path:
                e = graphs[edge.rank].e if edge.rank >= 0 else None
                event = edge.event if edge.event >= 0 and e is not None else None
                rows["rank"].append(rank)
                rows["step"].append(step)
                rows["edge"].append(edge.kind)
                rows["weight_ns"].append(edge.weight)
                rows["event_rank"].append(edge.rank if edge.rank >= 0 else None)
                rows["collective_key"].append(edge.key)
                rows["event_cat"].append(None if event is None else e.cat[event])
                rows["event_name"].append(None if event is None else e.name[event])
                rows["event_ts_ns"].append(None if event is None else int(e.ts[event]))
                rows["on_device"].append(None if event is None else bool(e.on_device[event]))
    return (pa.table({name: pa.array(values, type=COLUMNS[name]) for name, values in rows.items()}),
            pa.table({name: pa.array(values, type=GRAPH_COLUMNS[name]) for name, values in graph_rows.items()}))


def _add_graph(rows: dict[str, list], step: int, edges: list[Edge], graphs: dict[int, RankGraph],
               instances: list[Instance], positions: dict[int, int]) -> None:
    """A step's dependencies as rows: each end by rank, time and what it is, and the place on the
    step's critical path of those on it (`positions`, by the edge's id)."""
    by_node = {(x.key, x.rank): x for x in instances}
    begins: dict[str, int] = defaultdict(int)
    for x in instances:
        begins[x.key] = max(begins[x.key], x.start_ns)

    def described(node: Hashable) -> tuple[int | None, int, str]:
        if len(node) == 2:
            rank, own = node
            return rank, graphs[rank].time(own), f"{graphs[rank].e.name[own // 2]} {'end' if own % 2 else 'start'}"
        kind, key, rank = node
        if kind == "begin":
            return None, begins[key], f"{key}: last arrival"
        x = by_node[(key, rank)]
        at = {"start": x.start_ns, "begun": max(x.begin_ns, x.start_ns), "end": x.end_ns}[kind]
        return rank, at, f"{key}: {'arrival' if kind == 'start' else 'begin' if kind == 'begun' else 'end'}"

    for edge in edges:
        (from_rank, from_ns, from_node), (to_rank, to_ns, to_node) = described(edge.source), described(edge.target)
        for name, value in (("step", step), ("from_rank", from_rank), ("from_ns", from_ns), ("from_node", from_node),
                            ("to_rank", to_rank), ("to_ns", to_ns), ("to_node", to_node), ("dependency", edge.kind),
                            ("weight_ns", edge.weight), ("collective_key", edge.key),
                            ("critical_path_position", positions.get(id(edge)))):
            rows[name].append(value)


def register(con) -> None:
    """Build TABLE and GRAPH_TABLE in the session: the chosen steps' critical paths and graphs."""
    events = dict(con.execute(COUNT_QUERY).fetchall())
    windows = chosen_windows(con.sql(STEPS_QUERY).to_arrow_table(), events)
    sql.set_variables(con, **spans(windows))
    paths, graph = critical_paths(con.sql(EVENTS_QUERY).to_arrow_table(), windows, con.sql(INSTANCES_QUERY).to_arrow_table())
    for table, found in ((TABLE, paths), (GRAPH_TABLE, graph)):
        con.register("_critical_found", found)
        try:
            con.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT * FROM _critical_found').fetchall()
        finally:
            con.unregister("_critical_found")
