"""The sweep behind step_timeline, worked by hand on one rank."""

import numpy as np
import pyarrow as pa

from pipelines.analysis import sweep


CLASSES = {"compute": sweep.COMPUTE, "comm": sweep.COMM, "other": sweep.OTHER}


def column(rows, index):
    return np.array([row[index] for row in rows], np.int64)


def stretches(intervals, windows):
    """(step, state, start, end) of one rank's stretches, from (class, start, end) intervals and
    (step, start, end) windows."""
    classes = np.array([CLASSES[klass] for klass, _, _ in intervals], np.int8)
    table = sweep.rank_stretches(3, classes, column(intervals, 1), column(intervals, 2),
                                 column(windows, 0), column(windows, 1), column(windows, 2))
    return [(row["step"], row["state"], row["start_ns"], row["end_ns"]) for row in table.to_pylist()]


def test_states_follow_the_counts_and_windows_cut_them():
    intervals = [("compute", 0, 10), ("comm", 5, 20), ("other", 20, 30)]
    windows = [(0, 0, 15), (1, 15, 40)]
    assert stretches(intervals, windows) == [
        (0, "compute", 0, 5),
        (0, "overlapped_comm", 5, 10),
        (0, "exposed_comm", 10, 15),
        (1, "exposed_comm", 15, 20),  # the window's edge cuts the stretch; `other` under comm changes nothing
        (1, "other", 20, 30),
        (1, "idle", 30, 40),
    ]


def test_changes_at_one_instant_leave_one_stretch_with_the_final_state():
    # compute and comm start together, and compute starts again as the first compute ends
    intervals = [("comm", 100, 130), ("compute", 100, 110), ("compute", 110, 120)]
    assert stretches(intervals, []) == [
        (None, "overlapped_comm", 100, 120),
        (None, "exposed_comm", 120, 130),
    ]


def test_time_outside_every_window_has_no_step():
    intervals = [("compute", 0, 50)]
    windows = [(7, 10, 20)]
    assert stretches(intervals, windows) == [(None, "compute", 0, 10), (7, "compute", 10, 20), (None, "compute", 20, 50)]


def test_a_rank_swept_in_pieces_has_the_stretches_of_one_sweep():
    """Random intervals of every class, and windows with gaps, overlaps and shared edges: the
    pieces, cut at window starts, give exactly the whole rank's stretches."""
    generator = np.random.default_rng(7)
    for trial in range(20):
        count = int(generator.integers(50, 400))
        starts = generator.integers(0, 10_000, count)
        ends = starts + generator.integers(1, 300 if trial % 2 else 3_000, count)
        classes = generator.integers(0, 3, count).astype(np.int8)
        window_starts = np.sort(generator.choice(np.arange(0, 10_000, 25), 30, replace=False))
        window_ends = window_starts + generator.integers(10, 600, 30)
        steps = np.arange(30)
        whole = sweep.rank_stretches(0, classes, starts, ends, steps, window_starts, window_ends)
        pieces = list(sweep.rank_pieces(0, classes, starts, ends, steps, window_starts, window_ends, size=40))
        assert len(pieces) > 1
        assert pa.concat_tables(pieces).to_pylist() == whole.to_pylist()
