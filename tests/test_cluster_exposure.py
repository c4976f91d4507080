"""Exposed communication against what the link really costs, on real jobs on the emulated cluster.

Each job runs on two emulated hosts at 200 Mbit/s and at 1 Gbit/s, in turn; the step-time
difference says how long the link holds up a slow step (`LinkCost.link_ns`). The exposed
communication wirespeed finds the network held up per step of the slow runs (exposed communication
less the waits for a rank that was busy with something else, `step_sync.exposed_transfer_ns`) must
lie between 0.85 and 1.0 times it, in the slow run the cost came from: communication that hides
under compute is not exposed (below 1), and the latency a faster link would not remove is small
next to the transfers (not much above).

The link's cost is itself a measurement, and other work on this 2-core machine moves it. The
hypervisor took 3-32 % of the CPUs during one run or another, and a tensor-parallel job's lower-quartile
step at 1 Gbit/s measured 166-283 ms over six runs in a row: taken pair by pair, the link's share
of the slow step came out at 0.32-0.72 for one job in one test run. Disturbances only lengthen
runs, so the cost comes from each rate's least disturbed run (its mean step: single steps move with
where the ranks' steps begin, one short, the next long; more pairs while it was not quiet,
`measure_link_cost`), and the exposure is judged on that same slow run. A disturbance lengthens
the communication too: FSDP2's median over three slow runs, two of them disturbed, came out 1.103
against a cost from the least disturbed; pipeline runs in one session, 1.056 for the least
disturbed and 1.136 for one whose CPUs the hypervisor took 11 % of.
The bounds allow LINK_RESOLUTION either side. A job whose communication is all exposed sits at
1.0 plus the latency a faster link would not remove (FSDP2 on CPUs waits for each all-gather where
it issues it, having no streams to prefetch on: 0.995-1.009 on a quiet machine). The rule this
replaced gave 0.44, 0.00 and 0.05 for FSDP2, tensor and expert parallel, far outside either bound.
All exposed communication, waits included, gave 1.13-1.19 for the pipeline (its bubble: a stage
waits in its receive while the other computes) and 1.08-1.12 for expert parallel (a rank's
all-to-all waits for the other's routing), and more the slower the CPUs.
"""

from __future__ import annotations

import pytest

from conftest import ingest_directly, table_rows

DIMENSION = {"ddp": "dp", "fsdp": "fsdp", "tp": "tp", "pp": "pp", "ep": "ep"}
LINK_RESOLUTION = 0.1


@pytest.mark.parametrize("job", list(DIMENSION))
def test_exposed_communication_matches_what_the_link_costs(cluster_runs, store, job):
    cost = cluster_runs(job)
    run_ids = [ingest_directly(store, pair.slow.run_dir) for pair in cost.pairs]
    print(f"{job}: mean steps at {cost.slow_mbit:g} Mbit/s {[round(pair.slow.mean_step_ns / 1e6) for pair in cost.pairs]} ms, "
          f"at {cost.fast_mbit:g} {[round(pair.fast.mean_step_ns / 1e6) for pair in cost.pairs]} ms; "
          f"the link holds up a slow step {cost.link_ns / 1e6:.0f} ms; the hypervisor took "
          f"{[f'{run.steal_share:.0%}' for run in cost.runs]} of the CPUs (slow, fast, ...)")
    ratios = []
    for run_id in run_ids:
        exposed_ns, waiting_ns = table_rows(
            store,
            """
            SELECT sum(exposed_comm_ns) / count(*) AS exposed,
              (SELECT sum(exposed_wait_ns) FROM step_sync WHERE run_id = $run_id) / count(*) AS waiting
            FROM step_breakdown WHERE run_id = $run_id
            """,
            {"run_id": run_id},
        )[0].values()
        ratios.append((exposed_ns - waiting_ns) / cost.link_ns)
        print(f"{job}: {run_id}: exposed {exposed_ns / 1e6:.0f} ms a step, {waiting_ns / 1e6:.0f} ms of it waiting "
              f"for a busy rank; ratio of the rest {ratios[-1]:.3f}")
    quietest = [pair.slow for pair in cost.pairs].index(cost.quietest_slow)
    ratio = ratios[quietest]
    print(f"{job}: judged on the least disturbed slow run, {cost.quietest_slow.run_dir.name}: {ratio:.3f}")
    assert 0.85 - LINK_RESOLUTION <= ratio <= 1.0 + LINK_RESOLUTION, f"{job}: ratios {ratios}, quiet runs: {cost.quiet}"
    # The steps wait for the job's own dimension, over the network; the groups' shares add up.
    dimension, share, scope, unbalanced = table_rows(
        store,
        """
        SELECT arg_max(dimension, ns) AS dimension, max(ns) / sum(ns) AS share, arg_max(scope, ns) AS scope,
          (SELECT count(*) FROM step_breakdown AS b
           WHERE list_contains(?, b.run_id) AND b.exposed_comm_ns <> (
             SELECT coalesce(sum(g.exposed_comm_ns), 0) FROM step_comm_groups AS g
             WHERE g.run_id = b.run_id AND g.rank = b.rank AND g.step = b.step)) AS unbalanced
        FROM (SELECT dimension, scope, sum(exposed_comm_ns) AS ns FROM step_comm_groups
              WHERE list_contains(?, run_id) GROUP BY ALL)
        """,
        [run_ids, run_ids],
    )[0].values()
    assert (dimension, scope, unbalanced) == (DIMENSION[job], "inter", 0)
    assert share > 0.99
    # The critical path agrees: the network's communication on it, a rank-step's on average, is
    # what the link holds up a step.
    path_ratios = []
    for run_id in run_ids:
        on_path_ns = table_rows(store, """
            SELECT sum(path_ns) FILTER (WHERE part = 'communication' AND scope = 'inter')
              / (SELECT count(*) FROM step_breakdown WHERE run_id = $run_id) AS ns
            FROM step_critical_path WHERE run_id = $run_id""", {"run_id": run_id})[0]["ns"]
        path_ratios.append(on_path_ns / cost.link_ns)
    print(f"{job}: the network's communication on the critical path over what the link costs: "
          + ", ".join(f"{r:.3f}" for r in path_ratios))
    if job == "ddp":
        assert 0.85 - LINK_RESOLUTION <= path_ratios[quietest] <= 1.0 + LINK_RESOLUTION, path_ratios
