"""Device events find their step by time bucket (`_step_spans`), and the step they find is the one
an ASOF join finds: the latest to start at or before the launch, if the launch comes before that
step's end. Checked on steps as uneven as real runs make them, with work outside every step,
which `step_timeline` keeps with no step and `rank_breakdown` counts."""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import ingest_directly
from pipelines.warehouse.store import Warehouse
from synthetic import Kernel, Rank, write_run

# (step, start us, duration us): step 3 is a thousand typical steps long, step 5 starts inside
# step 4, and after step 5 comes a long gap with no step at all.
STEPS = [(1, 0, 100), (2, 100, 100), (3, 200, 100_000), (4, 100_200, 100), (5, 100_250, 200), (6, 200_000, 50)]
# Launches before the first step, on a step's first and last microsecond, deep inside the long
# step, inside the overlap, in the gap, and after the last step.
LAUNCHES = [-50, 5, 99.5, 100, 150, 300, 50_000, 100_199, 100_220, 100_260, 100_400, 150_000, 200_010, 250_000]


def asof_step(launch_us: float) -> int | None:
    started = [(start, number, dur) for number, start, dur in STEPS if start <= launch_us]
    if not started:
        return None
    start, number, dur = max(started)
    return number if launch_us < start + dur else None


@pytest.fixture(scope="module")
def uneven_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("uneven")
    kernels = [Kernel(start_us=launch + 3, dur_us=1, launch_us=launch) for launch in LAUNCHES]
    write_run(folder / "run", [Rank(0, "host-a", STEPS, kernels)], world_size=1)
    store = Warehouse(folder / "warehouse")
    store.ensure()
    run_id = ingest_directly(store, folder / "run")
    con = store.connect()
    yield con, run_id
    con.close()


def test_each_launch_counts_for_the_step_an_asof_join_finds(uneven_run):
    con, run_id = uneven_run
    found = dict(con.execute("SELECT step, device_events FROM steps WHERE run_id = $r", {"r": run_id}).fetchall())
    expected = Counter(asof_step(launch) for launch in LAUNCHES)
    assert found == {number: expected[number] for number, _, _ in STEPS}
    # The check is not empty: the long step, the overlap and the gap each decide some launch.
    assert (expected[3], expected[4], expected[5], expected[None]) == (3, 1, 2, 3)


def test_work_outside_every_step_window_has_no_step_and_counts_for_the_rank(uneven_run):
    con, run_id = uneven_run
    outside, inside = con.execute(
        "SELECT sum(dur_ns) FILTER (WHERE step IS NULL), sum(dur_ns) FILTER (WHERE step IS NOT NULL) "
        "FROM step_timeline WHERE run_id = $r AND state = 'compute'",
        {"r": run_id},
    ).fetchall()[0]
    in_steps = con.execute("SELECT sum(compute_ns) FROM step_breakdown WHERE run_id = $r", {"r": run_id}).fetchall()[0][0]
    whole = con.execute("SELECT compute_ns FROM rank_breakdown WHERE run_id = $r", {"r": run_id}).fetchall()[0][0]
    # The kernels before the first window and after the last (launched at -50 and 250,000 us) are
    # outside every window; the one launched in the gap runs inside step 5's window, which
    # reaches to step 6's. Two kernels overlap by half a microsecond, so compute is their union.
    busy_ns = union_ns([(launch + 3, launch + 4) for launch in LAUNCHES])
    assert busy_ns == 13_500
    assert outside == 2_000 and inside == in_steps == busy_ns - 2_000 and whole == busy_ns


def union_ns(spans_us: list[tuple[float, float]]) -> int:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans_us):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return round(total * 1000)
