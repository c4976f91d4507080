"""The deployment of deploy/ with real servers: PostgreSQL, Redis, the Dagster daemon and two Celery
workers on hosts of the emulated cluster, as `make scale-demo` brings it up."""

from __future__ import annotations

import json
import os

import pytest

from conftest import wirespeed
from pipelines.testbed.deployment import missing


def test_two_workers_parse_one_run_and_ingest_a_burst_once_each():
    """A 16-rank run lands with one worker, another with two, then 20 small runs at once. The second
    run's shards were parsed on both hosts, its tables equal an in-process ingest's, every run was
    ingested exactly once, and every Dagster run succeeded (a failed one stops the demo)."""
    reason = missing()
    if reason:
        if os.environ.get("WIRESPEED_REQUIRE_DEPLOYMENT"):
            pytest.fail(f"the deployment is required here (WIRESPEED_REQUIRE_DEPLOYMENT is set) but {reason}")
        pytest.skip(f"no deployment: {reason}")
    result = wirespeed("scale-demo", check=False)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    shown = json.loads(result.stdout)
    assert shown["workers"] == ["host1", "host2"] and shown["shards"] == 4
    assert shown["identical_tables"] is True, shown["tables_differing"]
    assert shown["runs_ingested"] == shown["runs_landed"] == 22 and shown["runs_ingested_twice"] == []
    # A run each for the large ones, and two batches of ten for the burst, one on each worker.
    assert shown["dagster_runs"] == 4 and shown["most_runs_at_once"] == 2
    batches = [steps["ingest_runs"][1] for steps in shown["steps"].values() if "ingest_runs" in steps]
    assert sorted(worker.split("@")[1] for worker in batches) == ["host1", "host2"]
    shards = {key: worker for key, (_, worker) in shown["steps"]["ranks16-two-workers"].items() if "parse_shard" in key}
    assert len(shards) == 4 and {worker.split("@")[1] for worker in shards.values()} == {"host1", "host2"}
    assert shown["seconds_one_worker"] > 0 and shown["seconds_two_workers"] > 0
