"""Exposed communication against what the link really costs, on real jobs on the emulated cluster.

Each job runs on two emulated hosts at 200 Mbit/s and at 1 Gbit/s, in turn; in each pair of runs
back to back, the step-time difference says how much of the slow step the link explains
(`RatePair.link_share`). The exposed share wirespeed measures on the slow run must lie between
0.85 and 1.0 times it, in the median pair: communication that hides under compute is not exposed
(below 1), and the latency a faster link would not remove is small next to the transfers (not
much above).

The link's share is itself a measurement, and other work on this 2-core machine moves it: over
one day of runs it spread over 0.839-0.946 for FSDP2 (the fast runs slow most, their gloo copies
and TCP processing competing for the CPUs) and 0.775-0.881 for the pipeline. Runs back to back
share most of a disturbance, the median pair leaves out the one most disturbed, and the bounds
allow LINK_SHARE_RESOLUTION either side. A job whose
communication is all exposed sits at 1.0 plus the latency a faster link would not remove (FSDP2 on
CPUs waits for each all-gather where it issues it, having no streams to prefetch on: 0.995-1.009
on a quiet machine). The rule this replaced gave 0.44, 0.00 and 0.05 for FSDP2, tensor and expert
parallel, far outside either bound.
"""

from __future__ import annotations

import statistics

import pytest

from conftest import ingest_directly, table_rows
from pipelines.warehouse import Warehouse

DIMENSION = {"ddp": "dp", "fsdp": "fsdp", "tp": "tp", "pp": "pp", "ep": "ep"}
LINK_SHARE_RESOLUTION = 0.1


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Warehouse:
    store = Warehouse(tmp_path_factory.mktemp("cluster-exposure") / "warehouse")
    store.ensure()
    return store


@pytest.mark.parametrize("job", list(DIMENSION))
def test_exposed_share_matches_what_the_link_costs(cluster_runs, store, job):
    cost = cluster_runs(job)
    run_ids = [ingest_directly(store, pair.slow.run_dir) for pair in cost.pairs]
    ratios = []
    for pair in cost.pairs:
        (exposed_share,) = table_rows(
            store,
            "SELECT sum(exposed_comm_ns) / sum(step_ns) AS share FROM step_breakdown WHERE run_id = ?",
            [pair.slow.run_dir.name],
        )[0].values()
        ratios.append(exposed_share / pair.link_share)
        print(f"{job}: step {pair.slow.median_step_ns / 1e6:.0f} ms at {cost.slow_mbit:g} Mbit/s, "
              f"{pair.fast.median_step_ns / 1e6:.0f} ms at {cost.fast_mbit:g}; link share {pair.link_share:.3f}, "
              f"exposed {exposed_share:.3f}, ratio {ratios[-1]:.3f}")
    ratio = statistics.median(ratios)
    assert 0.85 - LINK_SHARE_RESOLUTION <= ratio <= 1.0 + LINK_SHARE_RESOLUTION, f"{job}: ratios {ratios}"
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
