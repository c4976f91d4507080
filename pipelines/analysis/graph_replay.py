"""The replay of a step through the dependencies its trace records (`step_dependencies`).

The replay of pipelines/analysis/replay.py keeps one shift per rank: once a wait moves, everything after it
on the rank moves as far, a kernel that another stream ran beside the wait as much as the kernel
that waited. Where a trace records what waited for what (`cuda_sync` events: a stream waiting for
a collective's event, a call blocked until a kernel ended), a step is replayed through its graph
instead, and each point moves only as far as the chains that lead to it:

    t'(n) = max over edges e = (m, n) of (t'(m) + w'(e)) + r(n),

where r(n) = t(n) - max over e of (t(m) + w(e)) is how late the point was in the run beyond all
its dependencies, so that the run's own link gives back the run exactly. Only the collectives'
edges change: a collective begins when the last of its ranks arrives (every rank's arrival leads
to its begin; waiting weighs nothing itself), and each rank's transfer takes its measured time
times the collective's replayed duration over its duration at the run's own link (its share of
the link: collectives that shared one stretch together, as they would share another). A rank's
replayed step is its measured step plus how far its last point moved. The graph holds one step,
so a step replayed this way carries nothing over from the step before.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pipelines.analysis.critical_path import TRANSFER, WAIT, edge_order

# The steps whose every rank's trace records its waits, and their graphs (see step_critical_path's
# sync_recorded): a step with ranks that do not is replayed as a timeline.
QUERY = """
WITH recorded AS (
  SELECT DISTINCT rank, step FROM step_critical_path WHERE sync_recorded
),
graphed AS (
  SELECT b.step FROM step_breakdown AS b LEFT JOIN recorded AS r USING (rank, step)
  GROUP BY b.step HAVING bool_and(r.rank IS NOT NULL)
)
SELECT step, from_rank, from_ns, from_node, to_rank, to_ns, to_node, dependency, weight_ns, collective_key
FROM step_dependencies
WHERE step IN (SELECT step FROM graphed)
ORDER BY step, from_ns, to_ns
"""


@dataclass
class StepGraph:
    """One step's graph in the order its edges are replayed, and what a replay of it needs."""

    source: list[int]
    target: list[int]
    weight: np.ndarray  # ns, as replayed at the run's own rates (waiting: 0)
    transfer_key: list[str | None]  # the collective of a transfer edge
    time: np.ndarray  # per node, ns since the step's first point
    residual: np.ndarray  # per node, ns
    fixed: np.ndarray  # per node, the latest its edges that cannot move allow, plus its residual
    moving: list[int]  # the edges that can move (a transfer, or from a point that moves), in order
    end: dict[int, float]  # per rank, when its last point was (ns since the step's first)
    still_end: dict[int, float]  # per rank, when its last point that cannot move was
    moving_points: dict[int, list[int]]  # per rank, its points that can move

    def shifts(self, ratio: dict[str, np.ndarray], width: int) -> dict[int, np.ndarray]:
        """Per rank, how far its last point moves in each of `width` scenarios, each collective's
        transfer taking `ratio[key]` times its measured time."""
        replayed: dict[int, np.ndarray] = {}
        for index in self.moving:
            s, t, key = self.source[index], self.target[index], self.transfer_key[index]
            weight = self.weight[index] * ratio[key] if key is not None else self.weight[index]
            candidate = replayed.get(s, self.time[s]) + weight + self.residual[t]
            replayed[t] = np.maximum(replayed.get(t, self.fixed[t]), candidate)
        shifts = {}
        for rank, end in self.end.items():
            last = np.full(width, self.still_end.get(rank, -np.inf))
            for node in self.moving_points.get(rank, ()):
                last = np.maximum(last, replayed[node])
            shifts[rank] = last - end
        return shifts


def graphs(table: pa.Table) -> dict[int, StepGraph]:
    """Each graphed step's StepGraph, from QUERY's rows."""
    rows = table.to_pydict()
    by_step: dict[int, list[int]] = defaultdict(list)
    for index, step in enumerate(rows["step"]):
        by_step[step].append(index)
    return {step: _step_graph(rows, indexes) for step, indexes in by_step.items()}


def _step_graph(rows: dict[str, list], indexes: list[int]) -> StepGraph:
    ids: dict[tuple, int] = {}
    times: list[int] = []
    ranks: list[int | None] = []

    def node(rank, ns, text) -> int:
        found = ids.setdefault((rank, ns, text), len(ids))
        if found == len(times):
            times.append(ns)
            ranks.append(rank)
        return found

    source, target, weight, keys, kinds = [], [], [], [], []
    for i in indexes:
        source.append(node(rows["from_rank"][i], rows["from_ns"][i], rows["from_node"][i]))
        target.append(node(rows["to_rank"][i], rows["to_ns"][i], rows["to_node"][i]))
        kind = rows["dependency"][i]
        kinds.append(kind)
        weight.append(0 if kind == WAIT else rows["weight_ns"][i])
        keys.append(rows["collective_key"][i] if kind == TRANSFER else None)
    # Every rank's arrival leads to its collective's begin, not only the last one's: another rank
    # may be the last to arrive in a replay. The begin is the source of the edge to each rank's own
    # begin, the node a transfer leaves from.
    begun_key = {s: k for s, k in zip(source, keys) if k is not None}
    begin_of = {begun_key[t]: s for s, t, kind in zip(source, target, kinds) if ranks[s] is None and t in begun_key}
    for s, t, kind in list(zip(source, target, kinds)):
        if kind == WAIT and begun_key.get(t) in begin_of:
            source.append(s)
            target.append(begin_of[begun_key[t]])
            weight.append(0)
            keys.append(None)
    order, _ = edge_order(source, target, len(ids))
    source = [source[i] for i in order]
    target = [target[i] for i in order]
    weights = np.array([weight[i] for i in order], dtype=float)
    transfer_key = [keys[i] for i in order]
    first = min(times)
    time = np.array([t - first for t in times], dtype=float)
    latest = np.full(len(ids), -np.inf)
    for s, t, w in zip(source, target, weights):
        latest[t] = max(latest[t], time[s] + w)
    residual = np.where(np.isfinite(latest), time - latest, 0.0)
    moves = np.zeros(len(ids), dtype=bool)  # points a transfer leads to
    moving: list[int] = []
    fixed = np.full(len(ids), -np.inf)
    for index, (s, t, w, key) in enumerate(zip(source, target, weights, transfer_key)):
        if key is not None or moves[s]:
            moves[t] = True
            moving.append(index)
        else:
            fixed[t] = max(fixed[t], time[s] + w + residual[t])
    end: dict[int, float] = defaultdict(lambda: -np.inf)
    still_end: dict[int, float] = defaultdict(lambda: -np.inf)
    moving_points: dict[int, list[int]] = defaultdict(list)
    for n, rank in enumerate(ranks):
        if rank is not None:
            end[rank] = max(end[rank], time[n])
            if moves[n]:
                moving_points[rank].append(n)
            else:
                still_end[rank] = max(still_end[rank], time[n])
    return StepGraph(source, target, weights, transfer_key, time, residual, fixed, moving, dict(end),
                     dict(still_end), dict(moving_points))

