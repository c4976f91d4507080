"""Which process group each gloo collective ran in, and a send's or receive's peer, from the trace alone.

gloo's annotations (`gloo:all_reduce` on a worker thread) name no process group, so a run with
several groups (a 2-D mesh, a pipeline with data-parallel stages) cannot be told apart by them.
Two things in the trace say it instead:

* **Worker threads.** Every gloo process group runs its collectives on worker threads of its own
  (two unless its options say otherwise), started when the group is created. Groups are created in
  the same order on every rank, and their names count up in that order ("0" for the default group,
  then one per `new_group`), so a rank's worker threads, in the order they were started, serve its
  groups in the order of their names. Thread ids count up as threads start, until the system's
  limit (Linux's `pid_max`, 32768 by default), and then again from the bottom (300): the order
  they were started in is the ids' order, or that order turned round at its widest gap, where
  the ids wrapped (302 and 303 after 32760 and 32761). Both are tried (below) and the one whose
  groups fit better is kept, the ids' own on a tie. Threads of a group that ran nothing while
  profiling are absent, so the order alone does not say where one group's threads end.
* **Members.** A collective's instances end together on its members (the last message reaches
  every rank at about the same time), while instances of other groups end when they happen to. For
  each thread and each of its rank's groups, the cost is how far the thread's instances end from
  the nearest instance of the same op and size (overlapping it) on the group's farthest other
  member, as a share of the time the two span together, 1 where a member has none; a send or
  receive needs only its peer in the group. Its mean over the thread's instances is the thread's
  cost in that group. (A share of the instance's own duration would put the last member to
  arrive, which waits least, as far from its partner as from no instance at all on a busy
  machine, where ends are seen milliseconds apart.)

Each rank's threads are then given groups in order, each group at most `capacity` threads, with the
least total cost and, among equal costs, the fewest members: a small dynamic programme per rank. A
group fits a thread at least as badly as a group of some of its members, so the costs favour the
smallest group whose members all end together; where they tie, as when a default group that ran
nothing leaves its place in the order free and another pair's ends lie nearer than the partner's,
the smaller group is the one the instances show. Where a bigger group's collective ends first on a
smaller group's members (a default group's all-reduce on the ranks of one host) and the order and
capacity leave a choice, the smaller group is taken too: a limit of timing.

gloo runs a send or a receive on the thread that called it, inside the `c10d::send` or
`c10d::recv_` operator that names its peer by the peer's rank in the group. Such an instance goes
to a group in which that peer has a call of the opposite kind and the same size naming it back,
and of those to the one where the peer's instance ends nearest; its peer is then known by its
global rank.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

# The step of the analysis that builds TABLE, and what it reads.
STEP = "_gloo_groups_step"
TABLE = "_gloo_groups"
INSTANCES_QUERY = """
WITH device_ranks AS (
  SELECT DISTINCT rank FROM _device_events
),
annotations AS (
  SELECT rank, tid, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, collective_op(name) AS op,
    coalesce(dims_elements(input_dims), -1) AS elements
  FROM trace_events
  WHERE ph = 'X' AND cat = 'user_annotation' AND name LIKE 'gloo:%' AND is_valid_interval(ts_ns, dur_ns)
    AND rank NOT IN (SELECT rank FROM device_ranks)
),
calls AS (
  -- The operators that call a send or a receive, which name its peer.
  SELECT rank, tid, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns, coalesce(dst_rank, src_rank) AS peer
  FROM trace_events
  WHERE ph = 'X' AND cat = 'cpu_op' AND name IN ('c10d::send', 'c10d::recv_')
    AND rank IN (SELECT DISTINCT rank FROM annotations)
)
SELECT a.*, coalesce(c.end_ns >= a.start_ns AND a.op IN ('send', 'recv'), false) AS called_here,
  CASE WHEN c.end_ns >= a.start_ns AND a.op IN ('send', 'recv') THEN c.peer END AS peer_in_group
FROM annotations AS a
ASOF LEFT JOIN calls AS c ON c.rank = a.rank AND c.tid = a.tid AND c.start_ns <= a.start_ns
ORDER BY a.rank, a.tid, a.start_ns
"""
GROUPS_QUERY = "SELECT DISTINCT rank, pg_name, pg_ranks FROM process_groups"
QUERIES = (INSTANCES_QUERY, GROUPS_QUERY)
DEFAULT_THREADS_PER_GROUP = 2  # ProcessGroupGloo::Options' default
POINT_TO_POINT = {"send": "recv", "recv": "send"}
COLUMNS = {"rank": pa.int32(), "tid": pa.string(), "start_ns": pa.int64(), "pg_name": pa.string(), "peer": pa.int32()}


@dataclass(frozen=True)
class Group:
    name: str
    ranks: tuple[int, ...]  # global ranks, in the order of their ranks in the group

    @property
    def members(self) -> frozenset[int]:
        return frozenset(self.ranks)


def creation_order(name: str) -> tuple:
    """Groups' names count up as they are created; a name that is no number sorts after them."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def ranks_of(pg_ranks: str | None) -> tuple[int, ...]:
    try:
        ranks = json.loads(pg_ranks or "")
    except ValueError:
        return ()
    return tuple(int(r) for r in ranks) if isinstance(ranks, list) else ()


def end_distances(rank: np.ndarray, kind: np.ndarray, elements: np.ndarray, start: np.ndarray, end: np.ndarray,
                  ranks: np.ndarray) -> np.ndarray:
    """instances x ranks: how far each instance's end lies from the nearest end of an instance on
    that rank of the matching kind (a receive for a send, the same op otherwise) and size that
    overlaps it in time, as a share of the time the two span together: below 1 for any such
    instance, however short the own (the last member to arrive waits least), and 1 where there is
    none; 0 on its own rank."""
    distance = np.ones((len(rank), len(ranks)))
    column = {int(r): k for k, r in enumerate(ranks)}
    keys: dict[tuple, list[int]] = {}  # (op, size) -> the instances of that kind
    for i, key in enumerate(zip(kind.tolist(), elements.tolist())):
        keys.setdefault(key, []).append(i)
    for (op, size), members in keys.items():
        wanted = (POINT_TO_POINT.get(op, op), size)
        if wanted not in keys:
            continue
        mine = np.array(members)
        theirs = np.array(keys[wanted])
        for other in np.unique(rank[theirs]):
            on_other = theirs[rank[theirs] == other]
            on_other = on_other[np.argsort(end[on_other])]
            ends = end[on_other]
            at = np.searchsorted(ends, end[mine])
            best = np.ones(len(mine))
            for neighbour in (at - 1, at):
                valid = (neighbour >= 0) & (neighbour < len(ends))
                j = on_other[np.clip(neighbour, 0, len(ends) - 1)]
                overlaps = valid & (start[j] < end[mine]) & (end[j] > start[mine])
                span = np.maximum(np.maximum(end[j], end[mine]) - np.minimum(start[j], start[mine]), 1)
                best = np.where(overlaps, np.minimum(best, np.abs(end[j] - end[mine]) / span), best)
            distance[mine, column[int(other)]] = best
    distance[np.arange(len(rank)), [column[int(r)] for r in rank]] = 0.0
    return distance


def thread_cost(distance: np.ndarray, point_to_point: np.ndarray, own: int, group: Group, column: dict[int, int]) -> float:
    """The mean cost of a thread's instances (rows of `distance`) in `group`: the farthest other
    member's distance, the nearest for a send or receive; a group of no other traced member suits
    instances that coincide with no other rank."""
    others = [column[m] for m in sorted(group.members) if m != own and m in column]
    if not others:
        everyone = [k for r, k in column.items() if r != own]
        alone = distance[:, everyone].min(axis=1) if everyone else np.ones(len(distance))
        return float(np.mean(1.0 - np.minimum(alone, 1.0) if everyone else np.zeros(len(distance))))
    chosen = distance[:, others]
    return float(np.mean(np.where(point_to_point, chosen.min(axis=1), chosen.max(axis=1))))


def start_orders(threads: list[str]) -> list[list[str]]:
    """The orders a rank's worker threads may have been started in: their ids' order and, where
    the ids are numbers that may have wrapped, that order turned round at its widest gap."""
    ids = sorted(threads, key=lambda t: (int(t) if t.isdigit() else 0, t))
    if len(ids) < 2 or not all(t.isdigit() for t in ids):
        return [ids]
    gaps = np.diff([int(t) for t in ids])
    turn = int(gaps.argmax()) + 1
    return [ids, ids[turn:] + ids[:turn]]


def fit(total: float, members: int) -> tuple[float, int]:
    """How well threads fit their groups, the best least: the total cost (to nine places, so that
    sums taken in another order tie), then the groups' members summed over the threads."""
    return round(total, 9), members


def in_order(costs: np.ndarray, capacity: int, sizes: list[int]) -> list[int]:
    """The groups (columns) for threads (rows) in order, never going back to an earlier group, at
    most `capacity` threads each, with the least total cost and, among equal costs, the fewest
    members (`sizes`, per group) summed over the threads: a group fits a thread at least as badly
    as any group of some of its members, so on a tie the smaller group is the one its instances
    show (a default group that ran nothing while profiling leaves its place in the order free)."""
    threads, groups = costs.shape
    best = {(g, 1): (costs[0, g], sizes[g], [g]) for g in range(groups)}
    for t in range(1, threads):
        following: dict[tuple, tuple] = {}
        for (g, used), (total, members, path) in best.items():
            for h in range(g, groups):
                if h == g and used == capacity:
                    continue
                state = (h, used + 1 if h == g else 1)
                candidate = (total + costs[t, h], members + sizes[h], path + [h])
                if state not in following or fit(*candidate[:2]) < fit(*following[state][:2]):
                    following[state] = candidate
        best = following
    return min(best.values(), key=lambda found: fit(*found[:2]))[2]


def assign(instances: pa.Table, groups: pa.Table) -> pa.Table:
    """One row per gloo instance (rank, thread, start): its group's name and, for a send or a
    receive, its peer's global rank."""
    rows = {name: instances.column(name).to_numpy(zero_copy_only=False) for name in instances.column_names}
    if not len(rows.get("rank", ())):
        return pa.table({name: pa.array([], type=kind) for name, kind in COLUMNS.items()})
    rank = rows["rank"].astype(int)
    tid = rows["tid"].astype(str)
    op = rows["op"].astype(str)
    start, end = rows["start_ns"].astype(np.int64), rows["end_ns"].astype(np.int64)
    called = np.array([bool(v) for v in rows["called_here"]])
    size = rows["elements"].astype(np.int64)
    named = [None if v is None or np.isnan(v) else int(v) for v in rows["peer_in_group"]]
    calls: dict[tuple, list[int]] = {}  # (rank, op, size) -> the peers its calls name
    for i in np.flatnonzero(called):
        if named[i] is not None:
            calls.setdefault((int(rank[i]), op[i], int(size[i])), []).append(named[i])
    ranks = np.unique(rank)
    column = {int(r): k for k, r in enumerate(ranks)}
    distance = end_distances(rank, op, size, start, end, ranks)
    point_to_point = np.isin(op, list(POINT_TO_POINT))
    by_rank: dict[int, list[Group]] = {}
    for r, name, members in zip(*(groups.column(c).to_pylist() for c in ("rank", "pg_name", "pg_ranks"))):
        by_rank.setdefault(int(r), []).append(Group(str(name), ranks_of(members)))
    pg_name = np.full(len(rank), None, dtype=object)
    peer = np.full(len(rank), None, dtype=object)
    for r in ranks.tolist():
        candidates = sorted((g for g in by_rank.get(r, []) if r in g.members), key=lambda g: creation_order(g.name))
        if not candidates:
            continue
        mine = np.flatnonzero(rank == r)
        # Worker threads: the groups' own, in order.
        workers = mine[~called[mine]]
        threads = set(tid[workers].tolist())
        rows_of = {t: workers[tid[workers] == t] for t in threads}
        if threads:
            cost = {t: [thread_cost(distance[rows_of[t]], point_to_point[rows_of[t]], r, g, column) for g in candidates]
                    for t in threads}
            capacity = max(DEFAULT_THREADS_PER_GROUP, -(-len(threads) // len(candidates)))
            sizes = [len(g.members) for g in candidates]
            fits = []  # per order the threads were possibly started in: how well it fits, the ids' own first
            for order in start_orders(list(threads)):
                costs = np.array([cost[t] for t in order])
                chosen = in_order(costs, capacity, sizes)
                fits.append((fit(float(costs[np.arange(len(order)), chosen].sum()), sum(sizes[g] for g in chosen)), order, chosen))
            _, order, chosen = min(fits, key=lambda found: found[0])
            for t, g in zip(order, chosen):
                pg_name[rows_of[t]] = candidates[g].name
        # Sends and receives that ran on the thread that called them: each in a group where its
        # named peer (a rank of the group) names it back from an opposite call of the same size,
        # and of those where that peer's instance ends nearest.
        for i in mine[called[mine]]:
            options = []
            for g in candidates:
                if named[i] is not None:
                    if not 0 <= named[i] < len(g.ranks) or g.ranks[named[i]] == r:
                        continue
                    peers = [g.ranks[named[i]]]
                else:
                    peers = [m for m in g.ranks if m != r]
                traced = [m for m in peers if m in column]
                nearest = min(traced, key=lambda m: distance[i, column[m]], default=None)
                cost = distance[i, column[nearest]] if nearest is not None else 1.0
                found = nearest if len(peers) > 1 else peers[0]
                answered = any(0 <= k < len(g.ranks) and g.ranks[k] == r for k in calls.get((found, POINT_TO_POINT[op[i]], size[i]), ()))
                options.append((not answered, cost, len(g.ranks), creation_order(g.name), g, found))
            if options:
                *_, chosen, found = min(options, key=lambda o: o[:4])
                pg_name[i], peer[i] = chosen.name, found
    return pa.table({
        "rank": pa.array(rank, type=pa.int32()), "tid": pa.array(tid), "start_ns": pa.array(start),
        "pg_name": pa.array(pg_name.tolist(), type=pa.string()), "peer": pa.array(peer.tolist(), type=pa.int32()),
    })


def register(con) -> None:
    """Build TABLE in the session: every gloo instance's group and peer."""
    found = assign(con.sql(INSTANCES_QUERY).to_arrow_table(), con.sql(GROUPS_QUERY).to_arrow_table())
    con.register("_assigned", found)
    try:
        con.execute(f'CREATE OR REPLACE TABLE "{TABLE}" AS SELECT * FROM _assigned').fetchall()
    finally:
        con.unregister("_assigned")
