"""The sweep behind step_timeline, worked by hand on one rank."""

import numpy as np

from pipelines import sweep


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
