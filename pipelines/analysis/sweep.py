"""The sweep behind `step_timeline`: each rank's timeline cut into maximal stretches of one state.

Every activity interval (`_activity`) adds one to its class's count at its start and takes it
away at its end; the step windows add cut points that change no count. In time order, a running
sum of the changes gives the counts after each change, and the state follows from them, compute
first: communication under compute is overlapped, communication alone is exposed, copies and
fills alone are other, nothing at all is idle. A stretch starts at a change whose state differs
from the state just before it, and at every window edge, so no stretch crosses a window; it ends
where the next one starts. The stretches tile each rank's timeline from its first instant to its
last, so sums over them add up exactly.

Changes at one instant are ordered starts first, window edges next, ends last, and intervals of
no length are left out: no count drops to zero and comes back within an instant, so of the
stretches that start at one instant all but the last have no length (and are dropped), and the
last carries the instant's final state. A stretch belongs to the step of the last window opened
at its start, if it starts before that window ends.

It is written in NumPy, not SQL: a running sum over tens of millions of changes is one pass over
arrays, where DuckDB's window functions sorted and scanned them several times (ten million device
events: the SQL sweep and its writing took 14 s, this one 8 s, of which the sweep 2.7 s, its output
identical). The stretches stream out a piece of a rank at a time, straight into `step_timeline`'s
Parquet file.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa

from pipelines.analysis.rank_ranges import rank_ranges

STREAM = "_step_stretches"  # what sql/step_timeline.sql reads

# The activity classes, as codes (`_activity.class`); their counts decide the state.
COMPUTE, COMM, OTHER = 0, 1, 2
EDGE = 3  # a step window's start or end: a cut, no change of count
COUNTS_QUERY = "SELECT rank, count(*) FROM _activity WHERE end_ns > start_ns GROUP BY rank ORDER BY rank"
# The intervals of the ranks from $first to $last.
ACTIVITY_QUERY = f"""
SELECT rank, CAST(CASE class WHEN 'compute' THEN {COMPUTE} WHEN 'comm' THEN {COMM} ELSE {OTHER} END AS TINYINT) AS class,
  start_ns, end_ns
FROM _activity
WHERE end_ns > start_ns AND rank BETWEEN $first AND $last
"""
WINDOWS_QUERY = """
SELECT rank, step, window_start_ns, window_end_ns
FROM steps
WHERE window_start_ns IS NOT NULL AND window_end_ns > window_start_ns
ORDER BY rank, window_start_ns, step
"""
QUERIES = (COUNTS_QUERY, ACTIVITY_QUERY, WINDOWS_QUERY)
# Ranks are read in groups of about this many intervals (tens of megabytes of arrays), in a few
# scans of `_activity` however many its ranks; a rank is swept in pieces of about PIECE_INTERVALS
# (see `rank_pieces`), handed to DuckDB in batches of BATCH_ROWS stretches (a Parquet row group).
CHUNK_INTERVALS = 1_000_000
PIECE_INTERVALS = 250_000
BATCH_ROWS = 122_880

STATES = ("idle", "compute", "overlapped_comm", "exposed_comm", "other")
SCHEMA = pa.schema({"rank": pa.int32(), "step": pa.int64(), "state": pa.dictionary(pa.int8(), pa.string()),
                    "start_ns": pa.int64(), "end_ns": pa.int64()})


def stretches(con: duckdb.DuckDBPyConnection) -> pa.RecordBatchReader:
    """Every rank's stretches, a rank at a time, in the columns of SCHEMA. A statement on `con`
    consumes the stream, so the intervals are read, a group of ranks at a time, on a second
    connection to the same database."""
    windows = con.execute(WINDOWS_QUERY).fetchnumpy()
    chunks = rank_ranges(con.execute(COUNTS_QUERY).fetchall(), CHUNK_INTERVALS)
    (database,) = con.execute("SELECT current_database()").fetchall()[0]
    reader = con.cursor()
    reader.execute(f'USE "{database}"').fetchall()
    return pa.RecordBatchReader.from_batches(SCHEMA, _batches(reader, chunks, windows))


def _batches(reader: duckdb.DuckDBPyConnection, chunks: list[tuple[int, int]], windows: dict[str, np.ndarray]
             ) -> Iterator[pa.RecordBatch]:
    try:
        for first, last in chunks:
            activity = reader.execute(ACTIVITY_QUERY, {"first": first, "last": last}).fetchnumpy()
            by_rank = np.argsort(activity["rank"], kind="stable")
            ranks, firsts = np.unique(activity["rank"][by_rank], return_index=True)
            for rank, begin, end in zip(ranks, firsts, [*firsts[1:], len(by_rank)]):
                rows = by_rank[begin:end]
                mine = windows["rank"] == rank
                for piece in rank_pieces(int(rank), activity["class"][rows], activity["start_ns"][rows],
                                         activity["end_ns"][rows], windows["step"][mine],
                                         windows["window_start_ns"][mine], windows["window_end_ns"][mine]):
                    yield from piece.to_batches(max_chunksize=BATCH_ROWS)
            del activity, by_rank
    finally:
        reader.close()


def rank_pieces(rank: int, classes: np.ndarray, starts: np.ndarray, ends: np.ndarray, steps: np.ndarray,
                window_starts: np.ndarray, window_ends: np.ndarray, size: int = PIECE_INTERVALS) -> Iterator[pa.Table]:
    """One rank's stretches (see `rank_stretches`), swept in pieces of about `size` intervals
    each, so that a rank of millions of intervals needs arrays of a few tens of megabytes at a
    time. A piece starts where a step window starts and no earlier window is still open: a
    stretch starts there anyway, and no stretch after it belongs to an earlier window. Each
    piece's intervals are clipped to it, and its end is a cut: the stretches are those of one
    sweep of the whole rank."""
    cuts = []
    if len(starts) > size and len(window_starts) > 1:
        # A stable sort: the intervals come nearly in order, which it sorts in little more than a
        # pass (np.sort's default took four times as long on a rank of 1.2 million intervals).
        by_start = np.argsort(starts, kind="stable")
        sorted_starts = starts[by_start]
        cuts = _cuts(sorted_starts, window_starts, window_ends, size)
    if not cuts:
        yield rank_stretches(rank, classes, starts, ends, steps, window_starts, window_ends)
        return
    longest = int((ends - starts).max())
    bounds = [None, *cuts, None]
    for begin, end in zip(bounds, bounds[1:]):
        low = 0 if begin is None else int(np.searchsorted(sorted_starts, begin - longest))
        high = len(starts) if end is None else int(np.searchsorted(sorted_starts, end))
        rows = by_start[low:high]
        if begin is not None:
            rows = rows[ends[rows] > begin]
        first = 0 if begin is None else int(np.searchsorted(window_starts, begin))  # the piece's windows
        last = len(window_starts) if end is None else int(np.searchsorted(window_starts, end))
        yield rank_stretches(rank, classes[rows],
                             starts[rows] if begin is None else np.maximum(starts[rows], begin),
                             ends[rows] if end is None else np.minimum(ends[rows], end),
                             steps[first:last], window_starts[first:last], window_ends[first:last], cut_at=end)


def _cuts(sorted_starts: np.ndarray, window_starts: np.ndarray, window_ends: np.ndarray, size: int) -> list[int]:
    """Where to cut a rank's sweep into pieces of about `size` intervals, from its intervals'
    starts in order: window starts (in the order they open) where every earlier window has ended."""
    open_until = np.maximum.accumulate(window_ends)[:-1]  # the latest end of the windows before each
    candidates = window_starts[1:][open_until <= window_starts[1:]]
    starting_before = np.searchsorted(sorted_starts, candidates)
    cuts, last = [], 0
    for candidate, count in zip(candidates.tolist(), starting_before.tolist()):
        if count - last >= size:
            cuts.append(candidate)
            last = count
    return cuts


def rank_stretches(rank: int, classes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   steps: np.ndarray, window_starts: np.ndarray, window_ends: np.ndarray,
                   cut_at: int | None = None) -> pa.Table:
    """One rank's stretches, from its intervals (class codes, starts, ends) and its step windows
    (in the order they open); with `cut_at`, the last stretch ends there."""
    intervals, windows = len(starts), len(window_starts)
    cut = np.array([] if cut_at is None else [cut_at], np.int64)
    # Starts, window starts, window ends and cuts, ends: a stable sort by time keeps that order
    # within an instant. Each change is its class (EDGE for a window's) and +1 at a start, -1 at an end.
    at = np.concatenate([starts, window_starts, window_ends, cut, ends])
    order = np.argsort(at, kind="stable")
    at = at[order]
    code = np.concatenate([classes, np.full(2 * windows + len(cut), EDGE, np.int8), classes])[order]
    sign = np.concatenate([np.ones(intervals + windows, np.int8), -np.ones(windows + len(cut) + intervals, np.int8)])[order]
    edge = code == EDGE
    opened = np.cumsum(edge & (sign > 0), dtype=np.int32)  # windows opened so far
    # whether any interval of each class is running after each change
    counts = [np.cumsum(np.where(code == klass, sign, 0), dtype=np.int32) > 0 for klass in (COMPUTE, COMM, OTHER)]
    state = _state(*counts)
    changed = np.empty(len(state), bool)  # from the state just before (idle before the first change)
    changed[0] = state[0] != 0
    np.not_equal(state[1:], state[:-1], out=changed[1:])
    starts_stretch = np.flatnonzero(edge | changed)
    del order, code, sign, edge, counts, changed
    # the stretch starting at the last such change has no end: the timeline's last instant
    begin, end = at[starts_stretch[:-1]], at[starts_stretch[1:]]
    kept = end > begin
    first = starts_stretch[:-1][kept]
    begin, end = begin[kept], end[kept]
    window = np.clip(opened[first] - 1, 0, max(windows - 1, 0))
    inside = (opened[first] > 0) & (begin < window_ends[window]) if windows else np.zeros(len(begin), bool)
    step = pa.array(steps[window] if windows else np.zeros(len(begin), np.int64), mask=~inside)
    return pa.table([
        pa.array(np.full(len(begin), rank, np.int32)), step,
        pa.DictionaryArray.from_arrays(state[first], pa.array(STATES)), pa.array(begin), pa.array(end),
    ], schema=SCHEMA)


def _state(compute: np.ndarray, comm: np.ndarray, other: np.ndarray) -> np.ndarray:
    """Indexes into STATES: compute first, communication under compute is overlapped."""
    state = np.where(other, np.int8(4), np.int8(0))
    state[comm] = 3
    state[compute] = 1
    state[compute & comm] = 2
    return state
