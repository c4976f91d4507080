"""The replay what-if: each step of a run, replayed with every collective at another line rate.

The paper's model (pipelines/analysis/whatif.py) sees only data-parallel gradient buckets. The replay takes
every collective of every step from `whatif_inputs` and keeps the rest of each rank's timeline as
measured: what a rank did between waits takes as long as it did. Only three things move:

* a collective begins when its last rank arrives and its links are free: B' = max(arrivals',
  links free'). A link (a host's network link, which its ranks share, or a rank's own within the
  host; each direction of a full-duplex link on its own) carries one transfer at a time, in the
  order they began, and is free again once a transfer is through: what else a collective takes
  (rest_ns) is its ranks' own work, while another group's transfer uses the link. A process
  group's collectives over the same links run one after another, each to its end, and so do two
  ranks' sends and receives, both ways (one connection carries them);
* it takes its transfer at the new rate plus what the link would not shorten:
  d' = transfer_ns * scale + rest_ns (wire_ns + latency_ns, at full line rate, in place of
  transfer_ns + rest_ns when the scenario asks for it), where scale is the run's rate over the new one, over the compression
  ratio of its dimension, times the traffic factor's change when there are more ranks (at full
  line rate, a link of unknown rate in the run moves 8 S f bits at the new rate instead); on a
  slower link (scale above 1) only its link-bound time scales, and covers the rest of its transfer
  (beyond_link_ns): d' = max((transfer_ns - beyond_link_ns) * scale, transfer_ns) + rest_ns;
* a rank that waited for its instance waits until that ends: its shift (replayed time minus
  measured time) becomes max(shift - waited, end shift - slack) at the end of the wait. An
  instance that ended after its collective began ends as far into the replayed collective as it
  was into the measured one (a tied instance ends with it; a send that blocked until part of its
  data had left, part way); one that ended before it began keeps its own duration if it ended
  soon after it started (a buffered send), else it ends when the collective begins (a send
  blocked until its receiver came).

The run is replayed as one timeline, so that what one step leaves late (a pipeline's last
gradients, a slow rank's optimizer) delays the next; a step's replayed length on a rank is its
measured length plus how much the rank's shift grew over its window. A step whose every rank
records its waits (`cuda_sync` events) is replayed through its graph instead
(pipelines/analysis/graph_replay.py). Where collectives overlapped on one link, the queue's turns are not
how the link served them, and the run's own link may not give the run back exactly (a dp x tp
run at 1 Gbit/s replayed 6 % long, and its "full line rate" came out below "now"); the run is
the measure there, so a scenario in which no collective is slower than in the run replays no
step longer than measured, and one in which none is faster no step shorter. The recurrence is
sequential in time, so it runs here, over all scenarios at once (numpy vectors), rather than in
SQL.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from pipelines.analysis import graph_replay

# Dimensions that grow with the run: more ranks are more data-parallel replicas.
SCALED_DIMENSIONS = ("dp", "fsdp")
DURATION_ROWS = 4096  # collectives whose replayed durations are worked out at once (see Replay.durations)
# The searches' resolution: each ends once its range, in log space, is this narrow (the value
# found is within 5e-5 of itself above the least).
SEARCH_RESOLUTION = 5e-5
OPEN, ARRIVE, BEGIN, WAIT, CLOSE = range(5)  # the kinds of event the replay goes through


@dataclass(frozen=True)
class Scenario:
    """A link and traffic to replay: the network's and the intra-host rate (None: as measured),
    a compression ratio per dimension (1 where absent), and a multiple of the data-parallel ranks."""

    network_gbps: float | None = None
    intra_gbps: float | None = None
    compression: tuple[tuple[str, float], ...] = ()
    rank_multiple: int = 1
    line_rate: bool = False  # transfers at the link's full line rate, not at the rate they achieved


def busbw_factors(con) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The bus-bandwidth factor of each (op, group size), by its one definition (sql/macros.sql
    `busbw_factor`), in session `con`; 0 where it has none."""

    def factors(op: np.ndarray, n: np.ndarray) -> np.ndarray:
        rows = con.execute(
            "SELECT coalesce(busbw_factor(o, n), 0) FROM (SELECT unnest($op) AS o, unnest($n) AS n, "
            "unnest(range(len($op))) AS i) ORDER BY i",
            {"op": [str(x) for x in op], "n": [int(x) for x in n]},
        ).fetchall()
        return np.array([row[0] for row in rows], dtype=float)

    return factors


def channels(channel: str, intra: bool, way: str) -> list[tuple]:
    """The one-way links a rank's part of a collective occupies (its host's for the network, its
    own within the host): the ways of the full-duplex link that `whatif_inputs` says it holds."""
    link = "intra" if intra else "network"
    return [(channel, link, direction) for direction in (("out", "in") if way == "both" else (way,))]


class Replay:
    """The collectives and waits of a run (`whatif_inputs` rows) and its rank-steps (step_breakdown)."""

    def __init__(self, inputs: pa.Table, steps: pa.Table, factors: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 graphs: dict[int, graph_replay.StepGraph] | None = None):
        self.factors = factors  # the bus-bandwidth factor of (op, group size), for larger groups
        self._growth: dict[int, np.ndarray] = {}  # per rank multiple: every search asks again
        rows = {name: inputs.column(name).to_numpy(zero_copy_only=False) for name in inputs.column_names}
        self.rows = rows
        self.count = len(rows["rank"])
        self.dimension = rows["dimension"].astype(str)
        self.dimension_names, self.dimension_code = np.unique(self.dimension, return_inverse=True)
        self.transfer = rows["transfer_ns"].astype(float)
        self.link_bound = self.transfer - rows["beyond_link_ns"].astype(float)  # what scales on a slower link
        wire = rows["wire_ns"].astype(float)
        # At full line rate a transfer takes its bits at the line rate, and never longer than it
        # took (a measure faster than the line rate is the rate's fault, collective_bw says).
        self.wire = np.where(wire > 0, np.minimum(wire, self.transfer), self.transfer)
        self.bits = rows["bits"].astype(float)  # at full line rate B, the transfer takes bits / B ns
        self.rest = rows["rest_ns"].astype(float)
        self.latency = rows["latency_ns"].astype(float)  # what stays at full line rate
        self.link_gbps = np.nan_to_num(rows["link_gbps"].astype(float), nan=0.0)
        self.intra = rows["scope"].astype(str) == "intra"
        self.op = rows["op"].astype(str)
        self.group_size = np.nan_to_num(rows["group_size"].astype(float), nan=1.0).astype(int)
        self.step_rank = [(int(r), int(s)) for r, s in zip(steps.column("rank").to_pylist(), steps.column("step").to_pylist())]
        self.step_ns = np.array(steps.column("step_ns").to_pylist(), dtype=float)
        self.compute_ns = np.array(steps.column("compute_ns").to_pylist(), dtype=float)
        self.exposed_ns = self.step_ns - self.compute_ns
        self.window_start = np.array(steps.column("window_start_ns").to_pylist(), dtype=np.int64)
        self.window_end = np.array(steps.column("window_end_ns").to_pylist(), dtype=np.int64)
        self._schedule()
        self.own_ns = (self.transfer + self.rest)[self.first_rows]  # each collective's duration at the run's own link
        # The steps replayed through the dependencies their traces record (pipelines/analysis/graph_replay.py).
        index = {rank_step: k for k, rank_step in enumerate(self.step_rank)}
        self.graphs = [(graph, {rank: index[(rank, step)] for rank in graph.end if (rank, step) in index})
                       for step, graph in (graphs or {}).items()]
        self.graphed = sum(len(ranks) for _, ranks in self.graphs)

    def _schedule(self) -> None:
        """Every event of the run in time order (ns since its first): step windows opening,
        ranks arriving at collectives, collectives beginning, waits ending, step windows closing;
        as tuples of plain numbers, which the replay's loop reads fastest."""
        r = self.rows
        keys, collective = np.unique(r["collective_key"].astype(str), return_inverse=True)
        self.collectives = len(keys)
        self.keys = keys.tolist()
        step_ranks = np.array([rank for rank, _ in self.step_rank], dtype=int)
        ranks, rank_index = np.unique(np.concatenate([r["rank"].astype(int), step_ranks]), return_inverse=True)
        self.rank_count = len(ranks)
        self.rank_index = rank_index[: self.count].tolist()
        step_rank_index = rank_index[self.count:]
        base = min(r["start_ns"].min(), r["begin_ns"].min(), self.window_start.min())
        first = np.full(self.collectives, -1)
        first[collective[::-1]] = np.arange(self.count)[::-1]  # each collective's first row
        self.first_rows = first
        self.begins = (r["begin_ns"][first] - base).astype(float)
        measured = (r["collective_end_ns"][first] - r["begin_ns"][first]).astype(float)
        channel_ids: dict[tuple, int] = {}
        links: list[set[int]] = [set() for _ in range(self.collectives)]
        for i, c in enumerate(collective):
            for channel in channels(str(r["channel"][i]), bool(self.intra[i]), str(r["way"][i])):
                links[c].add(channel_ids.setdefault(channel, len(channel_ids)))
        ordered = [tuple(sorted(ids)) for ids in links]
        # A group's turn on the links it uses: one of its collectives at a time, each to its end; a
        # point-to-point transfer's turn on its two ranks' connection, both ways (`turn`).
        self.lanes = [channel_ids.setdefault(("turn", turn) if turn is not None else (str(pg), ids), len(channel_ids))
                      for pg, turn, ids in zip(r["pg"][first], r["turn"][first], ordered)]
        self.links = [np.array(ids, dtype=int) for ids in ordered]
        self.waits_for = [np.array((*ids, lane)) for ids, lane in zip(ordered, self.lanes)]
        # What no link shortens, per collective: its rest as achieved, and the latency's difference
        # from it at full line rate (0 where they are equal).
        self.fixed = list(zip(self.rest[first].tolist(), (self.latency[first] - self.rest[first]).tolist()))
        self.channel_count = len(channel_ids)
        waited = r["waited_ns"].astype(float)
        rooted = r["rooted"].astype(bool)
        slack = np.array([np.nan if v is None else float(v) for v in r["slack_ns"]])
        # (time, order at equal times, kind, index, collective or rank index, then what a wait needs)
        events = []
        self.ends_at_arrival = set()  # rows whose wait ends as far behind as their arrival was
        for k in range(len(self.step_rank)):
            events.append((float(self.window_start[k] - base), 0, OPEN, k, int(step_rank_index[k])))
            events.append((float(self.window_end[k] - base), 4, CLOSE, k, int(step_rank_index[k])))
        for i, c in enumerate(collective):
            events.append((float(r["start_ns"][i] - base), 1, ARRIVE, i, c))
            if first[c] == i:
                events.append((self.begins[c], 2, BEGIN, i, c))
            late = 0.0 if np.isnan(slack[i]) else slack[i]
            if waited[i] > 0 or not np.isnan(slack[i]):
                end, begin, start = float(r["end_ns"][i] - base), self.begins[c], float(r["start_ns"][i] - base)
                # Ended before the collective began: on its own if soon after it started (a buffered
                # send) or if its op is rooted (it needed only the root), else blocked until its peer
                # arrived (a send whose receiver was late, on clocks apart).
                own = end < begin and (rooted[i] or begin - end >= end - start)
                into = None if own else max(0.0, end - begin)
                at = end if own else max(end, begin)
                # Its end shift less its slack: that of its arrival, or its collective's begin shift
                # plus `into` times the collective's stretch (replayed over measured duration) less 1.
                part = 0.0 if into is None or measured[c] <= 0 else into / measured[c]
                shortfall = late + (0.0 if into is None or measured[c] <= 0 else into)
                # A rooted op's rank that ended on its own waited for the root's data: on the link,
                # so its wait stretches as its collective does.
                stretches = own and bool(rooted[i])
                events.append((at + late, 3, WAIT, i, c, float(waited[i]), into is None, part, shortfall, stretches))
                if into is None:
                    self.ends_at_arrival.add(i)
        events.sort(key=lambda e: (e[0], e[1], e[3]))
        self._events = events

    def rates(self, scenarios: list[Scenario], rows=slice(None)) -> np.ndarray:
        """rows x scenarios: the line rate of each collective's link in each scenario (0: as measured)."""
        network = np.array([s.network_gbps or 0.0 for s in scenarios])
        intra = np.array([s.intra_gbps or 0.0 for s in scenarios])
        return np.where(self.intra[rows, None], intra[None, :], network[None, :])

    def scale(self, scenarios: list[Scenario], rows=slice(None)) -> np.ndarray:
        """rows x scenarios: each collective's transfer time in each scenario over its time in the run."""
        rate = self.rates(scenarios, rows)
        link = self.link_gbps[rows, None]
        known = (rate > 0) & (link > 0)  # else the link stays as measured
        ratio = np.where(known, link / np.where(known, rate, 1.0), 1.0)
        compression = np.array([[dict(s.compression).get(d, dict(s.compression).get("all", 1.0)) for s in scenarios]
                                for d in self.dimension_names])
        ratio = ratio / compression[self.dimension_code[rows]]
        for multiple in {s.rank_multiple for s in scenarios} - {1}:
            chosen = np.array([s.rank_multiple == multiple for s in scenarios])
            ratio[:, chosen] *= self._traffic_growth(multiple)[rows, None]
        return ratio

    def _traffic_growth(self, multiple: int) -> np.ndarray:
        """Per row, how much more each rank sends with `multiple` times the data-parallel ranks."""
        if multiple not in self._growth:
            grows = np.isin(self.dimension, SCALED_DIMENSIONS)
            before = np.nan_to_num(self.rows["traffic_factor"].astype(float), nan=0.0)
            after = self.factors(self.op, self.group_size * multiple)
            self._growth[multiple] = np.where(grows & (before > 0), after / np.where(before > 0, before, 1.0), 1.0)
        return self._growth[multiple]

    def durations(self, scenarios: list[Scenario], rows=slice(None)) -> np.ndarray:
        """rows x scenarios: each collective's replayed duration, its transfer (as achieved, or at
        line rate) scaled, plus what no link shortens (as achieved: all the rest of its time; at
        full line rate: its latency alone, the transport's inefficiency gone with the rest).

        At full line rate, a collective whose link's rate the run does not know moves its bits at
        the scenario's rate: that needs only its size. As achieved, it stays as measured.

        Worked out DURATION_ROWS rows at a time: each step makes a matrix of rows x scenarios, and
        on a run of 55 000 collectives and 200 scenarios the ten of them took 0.5 GB at once.
        """
        index = np.arange(self.count)[rows]
        replayed = np.empty((len(index), len(scenarios)))
        for first, part in self._chunks(scenarios, index):
            replayed[first:first + len(part)] = part
        return replayed

    def summed_durations(self, scenarios: list[Scenario]) -> np.ndarray:
        """Per scenario, the sum of every row's replayed duration, without the rows x scenarios
        matrix of `durations` (75 MB for 55 000 rows and 170 scenarios)."""
        return sum((part.sum(axis=0) for _, part in self._chunks(scenarios, np.arange(self.count))),
                   np.zeros(len(scenarios)))

    def _chunks(self, scenarios: list[Scenario], index: np.ndarray):
        """The durations of rows `index`, DURATION_ROWS at a time, each with its first position."""
        for first in range(0, len(index), DURATION_ROWS):
            yield first, self._durations(scenarios, index[first:first + DURATION_ROWS])

    def _durations(self, scenarios: list[Scenario], rows: np.ndarray) -> np.ndarray:
        at_line_rate = np.array([s.line_rate for s in scenarios])[None, :]
        scale = self.scale(scenarios, rows)
        transfer = np.where(at_line_rate, self.wire[rows, None], self.transfer[rows, None]) * scale
        slower = ~at_line_rate & (scale > 1)  # the link-bound time scales, and covers the rest
        transfer = np.where(slower, np.maximum(self.link_bound[rows, None] * scale, self.transfer[rows, None]), transfer)
        rate = self.rates(scenarios, rows)
        bits = self.bits[rows, None]
        sized = at_line_rate & (self.link_gbps[rows, None] == 0) & (bits > 0) & (rate > 0)
        transfer = np.where(sized, bits / np.where(rate > 0, rate, 1.0) * scale, transfer)
        return transfer + np.where(at_line_rate, self.latency[rows, None], self.rest[rows, None])

    def run(self, scenarios: list[Scenario], groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """Each rank-step's replayed length (rank-steps x scenarios), and with `groups` (a group
        index per row) each group's replayed exposed wait, summed over its rows (groups x scenarios).

        A scenario in which no collective takes longer than at the run's own link replays no step
        longer than the run measured it, and one in which none is shorter no step shorter: the run
        is itself the measure at its own link, where the queue's turns may not give it back.
        """
        durations = self.durations(scenarios, self.first_rows)  # per collective, as its first row
        own = self.own_ns[:, None]
        step_ns, exposed = self._replay(durations, groups, np.array([sc.line_rate for sc in scenarios], dtype=float))
        measured = self.step_ns[:, None]
        no_slower, no_faster = (durations <= own).all(axis=0), (durations >= own).all(axis=0)
        step_ns = np.where(no_slower, np.minimum(step_ns, measured), step_ns)
        return np.where(no_faster, np.maximum(step_ns, measured), step_ns), exposed

    def _replay(self, durations: np.ndarray, groups: np.ndarray | None,
                line_rate: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The replay with each collective's durations (collectives x scenarios); `line_rate` is 1
        in a scenario at full line rate, else 0.

        Per rank, its shift: replayed time minus measured time, now. The loop runs once per event
        whatever the number of scenarios, so it does as few vector operations per event as it can.
        """
        width = durations.shape[1]
        duration = list(durations)
        step_ns = np.repeat(self.step_ns[:, None], width, axis=1)
        exposure = groups is not None
        exposed = np.zeros((int(groups.max(initial=-1)) + 1, width)) if exposure else None
        group_of = groups.tolist() if exposure else None
        zero = np.zeros(width)
        shift = [zero] * self.rank_count
        opened = [zero] * len(self.step_ns)
        # Only for the waits that read them, until they do: every row's would keep tens of
        # thousands of vectors alive.
        arrival_shift: dict[int, np.ndarray] = {}
        keep_arrival = self.ends_at_arrival
        arrived: list[np.ndarray | None] = [None] * self.collectives
        begin_shift = [zero] * self.collectives
        # When each one-way link, and each group's turn on it, is next free.
        free = np.full((self.channel_count, width), -np.inf)
        rank_of, begins, links, lanes, fixed = self.rank_index, self.begins, self.links, self.lanes, self.fixed
        waits_for, own_ns = self.waits_for, self.own_ns
        for event in self._events:
            kind = event[2]
            if kind == ARRIVE:
                t, _, _, i, c = event
                now = shift[rank_of[i]]
                if i in keep_arrival:
                    arrival_shift[i] = now
                arrival = now + t
                arrived[c] = arrival if arrived[c] is None else np.maximum(arrived[c], arrival)
            elif kind == WAIT:
                _, _, _, i, c, waited, at_arrival, part, shortfall, stretches = event
                if at_arrival:
                    end_less_slack = arrival_shift.pop(i, zero) - shortfall
                    if stretches and own_ns[c] > 0:
                        end_less_slack = end_less_slack + waited * (duration[c] / own_ns[c] - 1)
                elif part:
                    end_less_slack = begin_shift[c] + (duration[c] * part - shortfall)
                else:
                    end_less_slack = begin_shift[c] - shortfall
                rank = rank_of[i]
                before = shift[rank]
                after = np.maximum(before - waited, end_less_slack)
                shift[rank] = after
                if exposure:
                    exposed[group_of[i]] += after - before + waited
            elif kind == BEGIN:
                c = event[4]
                start = begins[c] if arrived[c] is None else arrived[c]
                start = np.maximum(start, free[waits_for[c]].max(axis=0))
                end = start + duration[c]
                rest, latency_less_rest = fixed[c]
                free[links[c]] = end - (rest + latency_less_rest * line_rate)
                free[lanes[c]] = end
                begin_shift[c] = start - begins[c]
            elif kind == OPEN:
                opened[event[3]] = shift[event[4]]
            else:
                step_ns[event[3]] += shift[event[4]] - opened[event[3]]
        if self.graphs:
            # Each collective's replayed time over its time at the run's own link (its share of
            # the link, where collectives shared one): those that shared a link stretch together.
            own = self.own_ns
            ratio = {key: duration[c] / own[c] if own[c] > 0 else np.ones(width) for c, key in enumerate(self.keys)}
            for graph, ranks in self.graphs:
                moved = graph.shifts(defaultdict(lambda: np.ones(width), ratio), width)
                for rank, k in ranks.items():
                    step_ns[k] = self.step_ns[k] + moved[rank]
        return step_ns, exposed

INPUTS_QUERY = "SELECT * FROM whatif_inputs ORDER BY rank, step, begin_ns"
STEPS_QUERY = ("SELECT rank, step, window_start_ns, window_end_ns, step_ns, step_ns - exposed_comm_ns AS compute_ns "
               "FROM step_breakdown ORDER BY rank, step")
# Compression and line rates searched over, and a stand-in for "infinitely fast".
COMPRESSION_RANGE = (1.0, 1e6)
BANDWIDTH_RANGE_GBPS = (1e-3, 1e7)
UNBOUNDED = 1e15


@dataclass(frozen=True)
class Cell:
    ranks: int
    bandwidth_gbps: float
    compression: float
    line_rate: bool = False

    @property
    def transfers(self) -> str:
        return "line rate" if self.line_rate else "achieved"


class Model:
    """The replay of one run, as the what-if tables and the CLI ask it: cells, searches, dimensions."""

    def __init__(self, replay: Replay, world_size: int):
        self.replay = replay
        self.world_size = world_size
        self.dimensions = sorted(set(replay.dimension))

    def scenario_text(self) -> str:
        """What the replay replayed, and on which dependencies."""
        replay = self.replay
        text = f"replay of {len(replay.step_ns)} rank-steps"
        if replay.graphed:
            text += f", {replay.graphed} of them through the waits their traces record"
        return text

    def scenario(self, cell: Cell, dimension: str = "all", intra_gbps: float | None = None) -> Scenario:
        return Scenario(cell.bandwidth_gbps, intra_gbps, ((dimension, cell.compression),), cell.ranks // self.world_size,
                        cell.line_rate)

    def scaling(self, scenarios: list[Scenario]) -> np.ndarray:
        """The scaling factor t_1 / step per scenario, of the median replayed step (medians over
        rank-steps: a trace's last step often holds the profiler's own teardown). Each distinct
        scenario is replayed once: the searches for two targets start from the same ends."""
        distinct = list(dict.fromkeys(scenarios))
        step_ns, _ = self.replay.run(distinct)
        factors = np.median(self.replay.compute_ns) / np.median(step_ns, axis=0)
        column = {scenario: k for k, scenario in enumerate(distinct)}
        return factors[[column[scenario] for scenario in scenarios]]

    def cells(self, cells: list[Cell]) -> tuple[list[dict], list[dict]]:
        """Per cell its predicted step; per cell and dimension the exposed communication."""
        scenarios = [self.scenario(cell) for cell in cells]
        replay = self.replay
        group = {dimension: k for k, dimension in enumerate(self.dimensions)}
        step_ns, exposure = replay.run(scenarios, np.array([group[d] for d in replay.dimension], dtype=np.int64))
        comm_ns = replay.summed_durations(scenarios) / len(replay.step_ns)
        fixed = replay.exposed_ns.sum() - replay.rows["waited_ns"].astype(float).sum()
        steps = len(replay.step_ns)
        scopes = {dimension: _scope(replay, replay.dimension == dimension) for dimension in self.dimensions}
        exposed = {dimension: exposure[group[dimension]] / steps for dimension in self.dimensions}  # per cell
        rows, parts = [], []
        compute = np.median(replay.compute_ns)
        for k, cell in enumerate(cells):
            typical = np.median(step_ns[:, k])
            rows.append({"ranks": cell.ranks, "bandwidth_gbps": cell.bandwidth_gbps, "compression": cell.compression,
                         "collectives": replay.collectives, "compute_ns": round(compute), "step_ns": round(typical),
                         "exposed_ns": round(typical - compute), "scaling_factor": float(compute / typical),
                         "transfers": cell.transfers, "comm_ns": round(comm_ns[k])})
            where = {"ranks": cell.ranks, "bandwidth_gbps": cell.bandwidth_gbps, "compression": cell.compression,
                     "transfers": cell.transfers}
            for dimension in self.dimensions:
                parts.append({**where, "dimension": str(dimension), "scope": scopes[dimension],
                              "exposed_ns": round(exposed[dimension][k])})
            parts.append({**where, "dimension": "fixed", "scope": None, "exposed_ns": round(fixed / steps)})
        return rows, parts

    def least(self, problems: list[tuple[Callable[[float], Scenario], float, tuple[float, float]]]) -> list[float | None]:
        """For each (make, target, (low, high)), the least x in [low, high] whose scenario make(x)
        reaches the target scaling factor, the step being non-increasing in x: `low` when it
        already does, None when no x does. All problems are searched together, in log space.

        Each pass tries seven points in every range still wider than SEARCH_RESOLUTION and keeps
        the part between the first that reaches its target and the one before it. Three cut the
        range into quarters, so each pass narrows it fourfold at least. The other four sit around
        where the step would reach the target if it grew on the straight line between the range's
        ends, taken against 1/x (a transfer's time is its bits over the rate, or its compressed
        bits): once a range is narrow enough for the step to be straight in it, as it is between
        the replay's turns, that pass ends the search. On a run of 55 000 collectives that took 3
        passes of 1 162 points where eight equal parts took 6 of 3 108; each point widens the
        vectors the replay's loop works on (on that run, 0.45 s a pass and 0.75 ms a point).
        """
        if not problems:
            return []
        makes = [make for make, _, _ in problems]
        goal = np.array([target for _, target, _ in problems])
        low, high = (np.array([bounds[k] for _, _, bounds in problems]) for k in (0, 1))
        ends = self.scaling([make(UNBOUNDED) for make in makes] + [make(x) for make, x in zip(makes, low)])
        reachable, already = ends[: len(goal)] >= goal, ends[len(goal):] >= goal
        lo, hi = np.log(low), np.log(high)
        at_lo, at_hi = ends[len(goal):], ends[: len(goal)]  # the scaling factor at each range's ends
        while (searched := np.flatnonzero(reachable & ~already & (hi - lo > SEARCH_RESOLUTION))).size:
            low_end, high_end = lo[searched], hi[searched]
            with np.errstate(divide="ignore", invalid="ignore"):
                # Where 1/SF, on the line through the ends against 1/x, is 1/target.
                u_low, u_high, g_low, g_high = np.exp(-low_end), np.exp(-high_end), 1 / at_lo[searched], 1 / at_hi[searched]
                u = u_low + (1 / goal[searched] - g_low) * (u_high - u_low) / (g_high - g_low)
                guess = np.where(np.isfinite(u) & (u > 0), -np.log(u), (low_end + high_end) / 2)
            quarter = (high_end - low_end) / 4
            points = np.column_stack([low_end + quarter * k for k in (1, 2, 3)] + [
                guess + SEARCH_RESOLUTION * k for k in (-4, -0.5, 0.5, 4)])
            points = np.sort(np.clip(points, low_end[:, None], high_end[:, None]), axis=1)
            sf = self.scaling([makes[k](float(np.exp(m))) for k, row in zip(searched, points) for m in row]).reshape(points.shape)
            # The range's ends around the points: the first that reaches and the one before it bound the new range.
            span = np.column_stack([low_end, points, high_end])
            values = np.column_stack([at_lo[searched], sf, at_hi[searched]])
            met = values >= goal[searched, None]
            met[:, 0], met[:, -1] = False, True
            rows, first = np.arange(len(searched)), met.argmax(axis=1)
            lo[searched], at_lo[searched] = span[rows, first - 1], values[rows, first - 1]
            hi[searched], at_hi[searched] = span[rows, first], values[rows, first]
        return [float(x) if a else (float(np.exp(h)) if r else None) for a, r, h, x in zip(already, reachable, hi, low)]

    def targets(self, cells: list[Cell], targets: tuple[float, ...]) -> list[dict]:
        """Per cell (its compression ignored), target and dimension ('all': every collective), the
        least compression of that traffic; per cell and target, the least network rate (intra-host
        as measured; the same at every B) and the least intra-host rate (network at the cell's B)."""
        places = sorted({(c.ranks, c.bandwidth_gbps, c.line_rate) for c in cells})
        dimensions = ["all", *self.dimensions]
        # A run of one dimension compresses all its traffic by compressing that dimension's: one search.
        searched = {d: "all" if len(self.dimensions) == 1 else d for d in dimensions}
        has_intra = bool((self.replay.intra & (self.replay.link_gbps > 0)).any())  # intra-host links of known rate
        problems: dict[tuple, tuple] = {}
        for r, b, f in places:
            for t in targets:
                for d in dict.fromkeys(searched.values()):
                    problems["compress", r, b, f, t, d] = (
                        lambda x, r=r, b=b, f=f, d=d: self.scenario(Cell(r, b, x, f), d), t, COMPRESSION_RANGE)
                problems["network", r, f, t] = (lambda x, r=r, f=f: self.scenario(Cell(r, x, 1.0, f)), t, BANDWIDTH_RANGE_GBPS)
                if has_intra:
                    problems["intra", r, b, f, t] = (
                        lambda x, r=r, b=b, f=f: self.scenario(Cell(r, b, 1.0, f), intra_gbps=x), t, BANDWIDTH_RANGE_GBPS)
        least = dict(zip(problems, self.least(list(problems.values())), strict=True))
        rows = []
        for r, b, f in places:
            for t in targets:
                for d in dimensions:
                    compression = least["compress", r, b, f, t, searched[d]]
                    rows.append({"ranks": r, "bandwidth_gbps": b, "transfers": Cell(r, b, 1.0, f).transfers,
                                 "target": t, "dimension": str(d),
                                 "reachable": compression is not None, "min_compression": compression,
                                 "min_bandwidth_gbps": least["network", r, f, t] if d == "all" else None,
                                 "min_intra_gbps": least.get(("intra", r, b, f, t)) if d == "all" else None})
        return rows


def _scope(replay: Replay, chosen: np.ndarray) -> str | None:
    scopes = replay.rows["scope"][chosen]
    if not len(scopes):
        return None
    values, counts = np.unique(scopes.astype(str), return_counts=True)
    return str(values[counts.argmax()])


RUN_QUERY = "SELECT any_value(world_size) FROM runs"
QUERIES = (INPUTS_QUERY, STEPS_QUERY, RUN_QUERY, graph_replay.QUERY)
CELL_COLUMNS = {"scenario": pa.string(), "ranks": pa.int32(), "bandwidth_gbps": pa.float64(), "compression": pa.float64(),
                "transfers": pa.string(),
                "collectives": pa.int64(), "compute_ns": pa.int64(), "comm_ns": pa.int64(), "exposed_ns": pa.int64(),
                "step_ns": pa.int64(), "scaling_factor": pa.float64()}
DIMENSION_COLUMNS = {"ranks": pa.int32(), "bandwidth_gbps": pa.float64(), "compression": pa.float64(), "transfers": pa.string(),
                     "dimension": pa.string(), "scope": pa.string(), "exposed_ns": pa.int64()}
TARGET_COLUMNS = {"ranks": pa.int32(), "bandwidth_gbps": pa.float64(), "transfers": pa.string(), "target": pa.float64(),
                  "dimension": pa.string(),
                  "reachable": pa.bool_(), "min_compression": pa.float64(), "min_bandwidth_gbps": pa.float64(),
                  "min_intra_gbps": pa.float64()}


def model_of(con) -> Model | None:
    """The replay of the run in session `con` (its whatif_inputs and step_breakdown); None when it
    has no collectives to replay."""
    inputs = con.sql(INPUTS_QUERY).to_arrow_table()
    if not inputs.num_rows:
        return None
    (world_size,) = con.execute(RUN_QUERY).fetchall()[0]
    graphs = graph_replay.graphs(con.sql(graph_replay.QUERY).to_arrow_table())
    replay = Replay(inputs, con.sql(STEPS_QUERY).to_arrow_table(), busbw_factors(con), graphs)
    return Model(replay, world_size or int(np.unique(inputs.column("rank").to_numpy()).size))


# The tables `register` makes: the cells, their exposure per dimension, and the targets' needs.
TABLES = ("_whatif_replay", "_whatif_replay_dimensions", "_whatif_replay_targets")


def register(con, rank_multiples: tuple[int, ...], bandwidths_gbps: tuple[float, ...], compressions: tuple[float, ...],
             targets: tuple[float, ...]) -> Model | None:
    """Replay the run over the grid into TABLES (in the connection's database), which whatif,
    whatif_dimensions and whatif_targets publish."""
    model = model_of(con)
    cells, parts, reached = [], [], []
    if model is not None:
        grid = [Cell(model.world_size * m, b, c, f) for f in (False, True) for m in rank_multiples
                for b in bandwidths_gbps for c in compressions]
        cells, parts = model.cells(grid)
        reached = model.targets(grid, targets)
        for cell in cells:
            cell["scenario"] = model.scenario_text()
    for name, rows, columns in zip(TABLES, (cells, parts, reached), (CELL_COLUMNS, DIMENSION_COLUMNS, TARGET_COLUMNS)):
        con.register("_replayed", _table(rows, columns))
        try:
            con.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM _replayed').fetchall()
        finally:
            con.unregister("_replayed")
    return model


def _table(rows: list[dict], columns: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({name: pa.array([row[name] for row in rows], type=kind) for name, kind in columns.items()})
