"""Device events find their step by time bucket (`span_buckets`, sql/steps.sql), and the step they
find is the one an ASOF join finds: the latest to start at or before the launch, if the launch
comes before that step's end. Checked on steps as uneven as real runs make them."""

from __future__ import annotations

from collections import Counter

from conftest import ingest_directly
from pipelines.warehouse import Warehouse
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


def test_each_launch_counts_for_the_step_an_asof_join_finds(tmp_path):
    kernels = [Kernel(start_us=launch + 3, dur_us=1, launch_us=launch) for launch in LAUNCHES]
    write_run(tmp_path / "run", [Rank(0, "host-a", STEPS, kernels)], world_size=1)
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    run_id = ingest_directly(store, tmp_path / "run")
    con = store.connect()
    try:
        found = dict(con.execute("SELECT step, device_events FROM steps WHERE run_id = $r", {"r": run_id}).fetchall())
    finally:
        con.close()
    expected = Counter(asof_step(launch) for launch in LAUNCHES)
    assert found == {number: expected[number] for number, _, _ in STEPS}
    # The check is not empty: the long step, the overlap and the gap each decide some launch.
    assert (expected[3], expected[4], expected[5], expected[None]) == (3, 1, 2, 3)
