"""The CLI's and the batches' runners: a run whose stage raises fails alone, in or out of the pool or a batch."""

from __future__ import annotations

import shutil

from conftest import TRACES
from pipelines.commands.ingest import ThroughDagster
from pipelines.stage_runner import SMALL_RUN_BYTES, Directly
from pipelines.warehouse.store import Warehouse


class Unheard:
    def advance(self, nbytes: int) -> None:
        pass


def test_a_run_whose_stage_raises_fails_alone(tmp_path):
    """`gone` and `gone-too` name no landing folder (one large, in this process; one small, in the
    pool), so their parse stages raise; `kept` is ingested all the same."""
    landing = tmp_path / "landing"
    (landing / "kept").mkdir(parents=True)
    shutil.copy(TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz", landing / "kept")
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    runner = Directly(store, {"kept": 10 << 20, "gone": SMALL_RUN_BYTES + 1, "gone-too": 1}, landing)
    outcomes = {name: runner.run(name, Unheard()) for name in ("kept", "gone", "gone-too")}
    runner.finish(outcomes)
    assert outcomes["kept"].error is None and store.report_path("kept").exists()
    for name in ("gone", "gone-too"):
        assert "FileNotFoundError" in outcomes[name].error and str(landing / name) in outcomes[name].error


def test_through_dagster_small_runs_go_in_one_batch_and_fail_alone(tmp_path, monkeypatch):
    """With DAGSTER_HOME, `kept`, `kept-too` and `gone-too` (small) are one Dagster run of the batch
    job, `gone` (large) a Dagster run of its own; the gone ones fail with their own errors, the kept
    ones are ingested, with their failed checks, and recorded under their partitions."""
    import dagster as dg

    landing = tmp_path / "landing"
    for name in ("kept", "kept-too"):
        (landing / name).mkdir(parents=True)
        shutil.copy(TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz", landing / name)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("WIRESPEED_LANDING", str(landing))
    (tmp_path / "dagster_home").mkdir()
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    runner = ThroughDagster(store, {"kept": 10 << 20, "kept-too": 10 << 20, "gone": SMALL_RUN_BYTES + 1, "gone-too": 1})
    try:
        outcomes = {name: runner.run(name, Unheard()) for name in ("kept", "kept-too", "gone", "gone-too")}
        assert [name for name, outcome in outcomes.items() if outcome is None] == ["kept", "kept-too", "gone-too"]
        runner.finish(outcomes)
        for name in ("kept", "kept-too"):
            assert outcomes[name].error is None and outcomes[name].failed_checks == ["ranks_match_world_size"]
            assert store.report_path(name).exists()
        for name in ("gone", "gone-too"):
            assert "FileNotFoundError" in outcomes[name].error and str(landing / name) in outcomes[name].error
        runs = runner.instance.get_runs()
        assert sorted(run.job_name for run in runs) == ["__ephemeral_asset_job__", "ingest_batch_job"]
        assert runner.instance.get_materialized_partitions(dg.AssetKey("run_report")) == {"kept", "kept-too"}
    finally:
        runner.instance.dispose()
