"""The validation matrix: jobs that differ from the one-group jobs in the ways real jobs do.

Each job runs on two emulated hosts at two rates in turn (several process groups,
two ranks per host where a dimension stays inside a host, buckets of different sizes, sends that
return before their data has gone: `isend`, a 1F1B schedule of `torch.distributed.pipelining`);
ranks of one host talk over its own loopback, which nothing shapes. For each job the test checks
what a user reads: which dimension's communication the steps waited for and over which link (the
dimensions that cross hosts over the network, the others within a host), no utilisation above the
line rate (each collective's, and the verdict's of the network while collectives moved data), every
exposed nanosecond in a group, the replay's prediction of the other rate's step, both ways, for
every pair of a slow and a fast run that the hypervisor left quiet (or each rate's least disturbed
run, where it left none quiet: `LinkCost.judged`), and
`wirespeed compare` of the two runs naming the network dimension. It prints the figures.

Two more meshes (FSDP2's hybrid sharding; experts within each host, data parallel across) run once
each at the fast rate, for the link of each dimension.

Predictions are judged as in test_replay.py, with the other run's compute in place of the run's
own (on this 2-core machine the same ops compute at different speeds in the two runs), each
direction in the median over its pairs, and printed raw too.
"""

from __future__ import annotations

import json
import statistics

import pytest

from conftest import ingest_directly, require_cluster, table_rows, wirespeed
from pipelines.warehouse import rollups
from pipelines.warehouse.store import Warehouse

# job: ranks per host, the link each dimension's collectives use, and its two rates (Mbit/s).
# ddp-buckets runs 10x apart, the others 5x; expert parallel's runs are test_cluster.py's too.
MATRIX = {
    "ddp-buckets": (1, {"dp": "inter"}, (100, 1000)),
    "dp-tp": (2, {"dp": "inter", "tp": "intra"}, (200, 1000)),
    "fsdp-tp": (2, {"fsdp": "inter", "tp": "intra"}, (200, 1000)),
    "pp": (2, {"pp": "inter", "dp": "intra"}, (200, 1000)),
    "pp-isend": (1, {"pp": "inter"}, (200, 1000)),
    "pp-schedule": (1, {"pp": "inter"}, (200, 1000)),
    "ep": (1, {"ep": "inter"}, (200, 1000)),
}
# Three runs at each rate, nine pairs: in one live round of two, dp x tp's 1 Gbit/s runs had their
# hosts reach the first bucket 32-44 ms apart in 4 of 12 steps (its 200 Mbit/s runs in 1 of 12), and
# the median from 200 Mbit/s came out -15.2 % (every other round lay within -7.0 and +7.3 %).
MATRIX_REPEATS = 3
# Each prediction, the median over pairs of a slow and a fast run, within this of the step measured
# at the other rate. The aim is 10 % and no pair beyond 20 %; on this shared 2-core machine, with
# four ranks on its two cores, two runs of one job at one rate differ by up to 15 % (dp x tp at
# 1 Gbit/s: 129 and 149 ms); with the link model of docs/whatif.md, dp x tp's round medians lay
# within 8 % over six kept rounds (the worst pair +22 %), every job's within 9.2 % in six live
# rounds. The bound catches the model's own failures: equal parts of busy periods gave +165 %,
# every collective's extra kept fixed +46 to +108 %, dp x tp's scaled +25 %, a link held to each
# collective's end +17 % in the median, a 110 ms wait left to no collective (its all-reduce's
# annotation closed 0.07 ms after the rank resumed) +27 %, an `isend` held to its wait +25 %, a
# 1F1B pipeline's sends matched with sends and its two ways at once −32 %.
TOLERANCE = 0.15
# Meshes beyond the matrix, run once at 1 Gbit/s with two ranks per host: the link each dimension's
# collectives use (their predictions at the other rate: docs/whatif.md, layouts outside the matrix).
BEYOND = {
    "hsdp": {"dp": "inter", "fsdp": "intra"},
    "ep-dp": {"dp": "inter", "ep": "intra"},
}


def replayed(store: Warehouse, run_id: str, rates_gbps: list[float], ranks: int) -> dict[float, dict]:
    """The run's replayed step at each rate, by rate (one `wirespeed whatif` for them all)."""
    out = wirespeed("whatif", run_id, "--warehouse", str(store.root), "--ranks", str(ranks),
                    "--bandwidth", ",".join(f"{gbps:g}" for gbps in rates_gbps), "--compression", "1", "--format", "json")
    rows = {row["bandwidth_gbps"]: row for row in json.loads(out.stdout)}
    assert sorted(rows) == sorted(rates_gbps), rows
    return rows


@pytest.mark.parametrize("job", list(MATRIX))
def test_each_dimension_on_its_link_and_the_other_rate_predicted(cluster_runs, store, job):
    per_host, scopes, rates_mbit = MATRIX[job]
    cost = cluster_runs(job, per_host, MATRIX_REPEATS, rates_mbit)
    slow, fast = cost.quietest_slow, cost.quietest_fast
    runs = {name: ingest_directly(store, run.run_dir) for name, run in (("slow", slow), ("fast", fast))}
    ranks = 2 * per_host

    # Each dimension on its link; the network's dimension holds the slow run's steps up most.
    for name, run_id in runs.items():
        rows = table_rows(store, """
            SELECT dimension, scope, sum(exposed_comm_ns) AS ns, count(*) FILTER (WHERE pg IS NULL) AS groupless
            FROM step_comm_groups WHERE run_id = ? GROUP BY ALL ORDER BY ns DESC""", [run_id])
        print(f"{job} {name}: exposed per dimension and link (ms per rank-step): "
              + ", ".join(f"{r['dimension']} {r['scope']} {r['ns'] / 1e6 / max(1, len(slow.steady_step_ns)):.0f}" for r in rows))
        assert {r["dimension"]: r["scope"] for r in rows} == scopes, rows
        assert sum(r["groupless"] for r in rows) == 0
        if name == "slow":
            assert scopes[rows[0]["dimension"]] == "inter", rows
        unbalanced, over = table_rows(store, """
            SELECT
              (SELECT count(*) FROM step_breakdown AS b WHERE b.run_id = $run AND b.exposed_comm_ns <> (
                 SELECT coalesce(sum(g.exposed_comm_ns), 0) FROM step_comm_groups AS g
                 WHERE g.run_id = b.run_id AND g.rank = b.rank AND g.step = b.step)) AS unbalanced,
              (SELECT count(*) FROM collective_bw WHERE run_id = $run AND utilization > 1) AS over""", {"run": run_id})[0].values()
        assert (unbalanced, over) == (0, 0)
        # The critical path's communication is each dimension's on its own link.
        on_path = table_rows(store, """
            SELECT dimension, scope, sum(path_ns) AS ns FROM step_critical_path
            WHERE run_id = ? AND part = 'communication' GROUP BY ALL ORDER BY ns DESC""", [run_id])
        print(f"{job} {name}: communication on the critical path (ms per rank-step): "
              + ", ".join(f"{r['dimension']} {r['scope']} {r['ns'] / 1e6 / max(1, len(slow.steady_step_ns)):.0f}" for r in on_path))
        assert all(scopes.get(r["dimension"]) == r["scope"] for r in on_path), on_path
        intra = table_rows(store, """SELECT median(transfer_busbw_gbps) AS gbps FROM collective_bw
                                     WHERE run_id = ? AND scope = 'intra'""", [run_id])[0]["gbps"]
        if intra is not None:
            print(f"{job} {name}: collectives within a host (loopback, unshaped) reached {intra:.1f} Gbit/s of bus bandwidth")

    # The other rate's step, both ways, for every pair of a slow and a fast quiet run, judged in the
    # median over pairs (one quick run at 1 Gbit/s, 120 ms where the other took 132, put one pair
    # +28 %); a faster link never slows a run, a slower one never speeds it.
    ids = {slow.run_dir: runs["slow"], fast.run_dir: runs["fast"]}
    for run in cost.runs:
        if run.run_dir not in ids:
            ids[run.run_dir] = ingest_directly(store, run.run_dir)
    rate = {p.slow.run_dir: cost.slow_mbit / 1000 for p in cost.pairs} | {p.fast.run_dir: cost.fast_mbit / 1000 for p in cost.pairs}
    at = {d: replayed(store, ids[d], [cost.slow_mbit / 1000, cost.fast_mbit / 1000], ranks) for d in ids}
    own = {d: at[d][rate[d]] for d in ids}
    print(f"{job}: the hypervisor took " + ", ".join(f"{run.run_dir.name} {run.steal_share:.0%}" for run in cost.runs))
    slows, fasts = cost.judged()
    errors = {"slow at fast": [], "fast at slow": []}
    for pair_name, sources, targets in (("slow at fast", slows, fasts), ("fast at slow", fasts, slows)):
        for source in sources:
            for target in targets:
                row = at[source.run_dir][rate[target.run_dir]]
                measured_ms = target.median_step_ns / 1e6
                held = row["step_ms"] - row["compute_ms"] + own[target.run_dir]["compute_ms"]
                errors[pair_name].append(held / measured_ms - 1)
                print(f"{job}: {source.run_dir.name} replayed at {row['bandwidth_gbps']:g} Gbit/s: {row['step_ms']:.0f} ms "
                      f"({row['step_ms'] / measured_ms - 1:+.1%} raw), {held:.0f} ms with {target.run_dir.name}'s compute; "
                      f"measured {measured_ms:.0f} ms ({errors[pair_name][-1]:+.1%}); by dimension {row['exposed_ms_by_dimension']}")
                if pair_name == "slow at fast":
                    assert row["step_ms"] <= own[source.run_dir]["step_ms"]
                else:
                    assert row["step_ms"] >= own[source.run_dir]["step_ms"]
    medians = {name: statistics.median(values) for name, values in errors.items()}
    print(f"{job}: median over pairs: " + ", ".join(f"{name} {m:+.1%}" for name, m in medians.items())
          + "; the farthest pair: " + ", ".join(f"{name} {max(values, key=abs):+.1%}" for name, values in errors.items()))
    assert all(abs(m) <= TOLERANCE for m in medians.values()), errors

    # "At full line rate" is never below "now".
    con = store.connect()
    try:
        rollups.recompute(con)
        for run_id in runs.values():
            estimated, full_rate, used = con.execute(
                "SELECT estimated_sf, full_rate_sf, utilization FROM verdict WHERE run_id = ?", [run_id]).fetchone()
            (nic,) = con.execute("""SELECT max(comm_mean_utilization) FROM network_summary
                                     WHERE run_id = ? AND source = 'counters' AND link_gbps IS NOT NULL""", [run_id]).fetchone()
            print(f"{job}: {run_id}: scaling factor {estimated:.2f} now, {full_rate:.2f} at full line rate; "
                  f"the network used {used:.0%} of its line rate while collectives moved data "
                  f"(the NIC's counters over the windows in which collectives moved data: {'unknown' if nic is None else f'{nic:.0%}'})")
            assert full_rate >= estimated - 0.01
            assert 0 < used <= 1
            # Two ranks of a host sending at once each get part of its NIC; together they use what
            # its counters show while collectives move data (the counters' windows, which also hold
            # time before and after the transfers, only dilute it): dp x tp at 200 Mbit/s, 98 %
            # against 76 %, where each collective's own rate read 30 %.
            assert nic is None or used >= 0.8 * nic, (used, nic)
    finally:
        con.close()

    # The comparison names the network's dimension as what changed most.
    compared = wirespeed("compare", runs["slow"], runs["fast"], "--warehouse", str(store.root)).stdout
    network = next(d for d, scope in scopes.items() if scope == "inter")
    assert f"largest change: exposed communication: {network} (network)" in compared, compared


@pytest.mark.parametrize("job", list(BEYOND))
def test_meshes_beyond_the_matrix_put_each_dimension_on_its_link(store, tmp_path, job):
    require_cluster()
    from pipelines.testbed.cluster import run_job

    run_id = ingest_directly(store, run_job(job, 1000, tmp_path / "landing", ranks_per_host=2).run_dir)
    rows = table_rows(store, """
        SELECT dimension, scope, pg_desc, sum(exposed_comm_ns) AS ns, count(*) FILTER (WHERE pg IS NULL) AS groupless
        FROM step_comm_groups WHERE run_id = ? GROUP BY ALL ORDER BY ns DESC""", [run_id])
    print(f"{job}: exposed per dimension, group and link (ms): "
          + ", ".join(f"{r['dimension']} ({r['pg_desc']}) {r['scope']} {r['ns'] / 1e6:.0f}" for r in rows))
    assert {r["dimension"]: r["scope"] for r in rows} == BEYOND[job], rows
    assert sum(r["groupless"] for r in rows) == 0
    (over,) = table_rows(store, "SELECT count(*) AS n FROM collective_bw WHERE run_id = ? AND utilization > 1", [run_id])
    assert over["n"] == 0
