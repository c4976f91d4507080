"""The Dagster code location: it loads, and the sensor -> partition -> materialisation path works."""

from __future__ import annotations

import json
import logging
import os
import shutil

import dagster as dg
import pytest

from conftest import GLOO_RANKS, TRACES
from pipelines.definitions import defs
from pipelines.defs.ingest.sensors import landing_sensor
from pipelines.defs.resources import WarehouseResource
from pipelines.warehouse.store import Warehouse


@pytest.fixture(scope="module")
def definitions() -> dg.Definitions:
    loaded = defs()
    dg.Definitions.validate_loadable(loaded)
    return loaded


def test_code_location_loads(definitions):
    keys = {key.to_user_string() for key in definitions.resolve_asset_graph().get_all_asset_keys()}
    assert {"trace_events", "steps", "collectives", "step_breakdown", "rank_breakdown", "run_report", "run_summary"} <= keys
    assert definitions.resolve_job_def("ingest_job") and definitions.resolve_job_def("reanalyze_job")
    assert definitions.resolve_sensor_def("landing_sensor") and definitions.resolve_schedule_def("hourly_rollups")
    assert definitions.resolve_sensor_def("regression_alert_sensor")
    # A run's steps follow one another: one process per Dagster run, not one per step.
    assert {definitions.resolve_job_def(j).executor_def.name for j in ("ingest_job", "reanalyze_job")} == {"in_process"}


def test_sensor_asks_for_a_bounded_batch_per_tick_first_finished_first(tmp_path, monkeypatch):
    from pipelines.defs.ingest import sensors

    landing = tmp_path / "landing"
    for index, name in enumerate(["c-run", "a-run", "b-run"]):
        (landing / name).mkdir(parents=True)
        (landing / name / "_DONE").touch()
        os.utime(landing / name / "_DONE", ns=(10**18 + index, 10**18 + index))
    monkeypatch.setattr(sensors, "MAX_RUNS_PER_TICK", 2)
    resource = WarehouseResource(root=str(tmp_path / "warehouse"), landing=str(landing))
    instance = dg.DagsterInstance.ephemeral()
    first = landing_sensor(dg.build_sensor_context(instance=instance, resources={"warehouse": resource}))
    assert requested(first) == [("ingest_batch_job", ["c-run", "a-run"])]
    context = dg.build_sensor_context(instance=instance, resources={"warehouse": resource}, cursor=first.cursor)
    second = landing_sensor(context)
    assert requested(second) == [("ingest_job", ["b-run"])]  # one run alone: its own Dagster run
    context = dg.build_sensor_context(instance=instance, resources={"warehouse": resource}, cursor=second.cursor)
    assert isinstance(landing_sensor(context), dg.SkipReason)


def requested(tick) -> list[tuple[str, list[str]]]:
    """A sensor tick's run requests, each as its job and the runs it ingests."""
    return [
        (r.job_name, r.run_config["ops"]["ingest_runs"]["config"]["run_ids"] if r.job_name == "ingest_batch_job" else [r.partition_key])
        for r in tick.run_requests
    ]


def test_sensor_batches_small_runs_and_gives_a_large_one_its_own_run(tmp_path, monkeypatch):
    from pipelines.defs.ingest import batches

    landing = tmp_path / "landing"
    for index, name in enumerate(["large", "s1", "s2", "s3", "s4", "s5"]):
        (landing / name).mkdir(parents=True)
        (landing / name / "trace.json").write_bytes(b"x" * (5000 if name == "large" else 100))
        (landing / name / "_DONE").touch()
        os.utime(landing / name / "_DONE", ns=(10**18 + index, 10**18 + index))
    monkeypatch.setattr(batches, "SMALL_RUN_BYTES", 1000)
    monkeypatch.setattr(batches, "BATCH_RUNS", 2)
    resource = WarehouseResource(root=str(tmp_path / "warehouse"), landing=str(landing))
    tick = landing_sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"warehouse": resource}))
    assert sorted(requested(tick)) == [
        ("ingest_batch_job", ["s1", "s2"]), ("ingest_batch_job", ["s3", "s4"]), ("ingest_job", ["large"]), ("ingest_job", ["s5"]),
    ]
    assert tick.dynamic_partitions_requests[0].partition_keys == ["large", "s1", "s2", "s3", "s4", "s5"]
    assert len({r.run_key for r in tick.run_requests}) == 4


def test_a_batch_records_every_run_under_its_partition_and_fails_only_the_bad_one(definitions, tmp_path):
    """A batch ingests each run as its assets would, recording their materialisations and checks
    under each run's partition; a run folder that went away fails alone, and names itself."""
    landing = tmp_path / "landing"
    for name, trace in [("first", "hta_ddp_nccl_meta_2024/nccl_data.json.gz"),
                        ("second", "hta_single_rank_of_multirank/cpu_only_gloo_rank34_of300.pt.trace.json.gz")]:
        (landing / name).mkdir(parents=True)
        shutil.copy(TRACES / trace, landing / name)
        (landing / name / "_DONE").touch()
    resource = WarehouseResource(root=str(tmp_path / "warehouse"), landing=str(landing))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("runs", ["first", "second", "gone"])
    outcome = definitions.resolve_job_def("ingest_batch_job").execute_in_process(
        run_config={"ops": {"ingest_runs": {"config": {"run_ids": ["first", "gone", "second"]}}}},
        instance=instance, resources={"warehouse": resource}, raise_on_error=False,
    )
    assert not outcome.success
    (failure,) = outcome.get_step_failure_events()
    assert "1 of 3 runs failed: gone:" in failure.event_specific_data.error.message
    for asset in ("trace_events", "step_breakdown", "whatif", "run_report"):
        assert instance.get_materialized_partitions(dg.AssetKey(asset)) == {"first", "second"}, asset
    evaluations = {
        (e.dagster_event.event_specific_data.partition, e.dagster_event.event_specific_data.check_name)
        for e in instance.all_logs(outcome.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    }
    assert {("first", "breakdown_adds_up"), ("second", "steps_found"), ("first", "no_regression")} <= evaluations
    assert {partition for partition, _ in evaluations} == {"first", "second"}
    report = instance.get_latest_materialization_event(dg.AssetKey("run_report")).asset_materialization
    assert report.metadata["verdict"].value.startswith("**") and report.metadata["path"].value.endswith(".html")
    assert Warehouse(resource.root).report_path("first").exists() and Warehouse(resource.root).report_path("second").exists()


def test_workspace_file_names_the_code_location():
    from conftest import REPO

    text = (REPO / "workspace.yaml").read_text()
    assert "module_name: pipelines.definitions" in text and "location_name: wirespeed" in text


def test_sensor_partition_materialisation(definitions, gloo_run, tmp_path):
    landing = tmp_path / "landing"
    shutil.copytree(gloo_run, landing / "gloo-live")
    unfinished = landing / "still-running"
    shutil.copytree(gloo_run, unfinished)
    (unfinished / "_DONE").unlink()
    resource = WarehouseResource(root=str(tmp_path / "warehouse"), landing=str(landing))
    instance = dg.DagsterInstance.ephemeral()

    # 1. The sensor sees the finished run only, adds its partition and asks for one run.
    result = landing_sensor(dg.build_sensor_context(instance=instance, resources={"warehouse": resource}))
    assert [r.partition_key for r in result.run_requests] == ["gloo-live"]
    assert result.dynamic_partitions_requests[0].partition_keys == ["gloo-live"]
    instance.add_dynamic_partitions("runs", ["gloo-live"])

    # 2. The requested job materialises every per-run asset and evaluates every check.
    job = definitions.get_repository_def().get_job("ingest_job")
    outcome = job.execute_in_process(
        partition_key="gloo-live",
        instance=instance,
        resources={"warehouse": resource},
        run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
    )
    assert outcome.success
    checks = {e.check_name: e.passed for e in outcome.get_asset_check_evaluations()}
    assert checks == {
        "ranks_match_world_size": True, "no_negative_durations": True, "no_skipped_data": True,
        "steps_found": True, "communication_found": True, "breakdown_adds_up": True, "exposure_attributed": True,
        "collectives_agree_across_ranks": True,  # the Flight Recorder dumps of a clean run agree
        "no_regression": True,  # the job's first run: no baseline to be worse than
    }
    materialized = {event.asset_key.to_user_string() for event in outcome.get_asset_materialization_events()}
    assert {"trace_events", "step_breakdown", "run_report"} <= materialized
    # The report's materialisation carries the answer: the verdict, its figures, where the file is.
    (report,) = [e.materialization for e in outcome.get_asset_materialization_events() if e.asset_key == dg.AssetKey("run_report")]
    assert report.metadata["verdict"].value.startswith("**") and "exposed communication" in report.metadata["verdict"].value
    exact = report.metadata["exact figures (verdict table)"].value
    assert report.metadata["exposed communication (% of step time)"].value == round(100 * exact["exposed_comm_share"], 1) > 0
    assert report.metadata["path"].value.endswith("gloo-live.html")
    store = Warehouse(resource.root)
    assert store.report_path("gloo-live").exists()
    con = store.connect()
    assert con.execute("SELECT count(DISTINCT rank) FROM step_breakdown WHERE run_id = 'gloo-live'").fetchall() == [(GLOO_RANKS,)]
    con.close()

    # 3. Nothing changed: the next tick skips; a change after ingest is noticed and re-ingested.
    cursor = result.cursor
    again = landing_sensor(dg.build_sensor_context(instance=instance, resources={"warehouse": resource}, cursor=cursor))
    assert isinstance(again, dg.SkipReason)
    (landing / "gloo-live" / "traces" / "rank1.pt.trace.json").touch()
    changed = landing_sensor(dg.build_sensor_context(instance=instance, resources={"warehouse": resource}, cursor=cursor))
    assert [r.partition_key for r in changed.run_requests] == ["gloo-live"]
    assert changed.run_requests[0].run_key != result.run_requests[0].run_key
    assert changed.dynamic_partitions_requests[0].partition_keys == []
    assert json.loads(changed.cursor)["gloo-live"] != json.loads(cursor)["gloo-live"]


def test_the_report_materialisation_shows_figures_as_a_person_reads_them(tmp_path):
    """The asset catalog shows 6.0 (% of step time) and 0.95, not 0.05988858952686023 and
    0.9520342892008682; the exact values are one entry away, under the verdict table's names."""
    from pipelines.defs.reports.assets import report_metadata

    verdict = {"bottleneck": "communication-bound", "explanation": "...", "exposed_comm_share": 0.05988858952686023,
               "utilization": None, "full_rate_sf": 0.9871, "estimated_sf": 0.9520342892008682}
    metadata = report_metadata(verdict, tmp_path / "run.html")
    shown = {key: entry.value for key, entry in metadata.items() if isinstance(entry, dg.FloatMetadataValue)}
    assert shown == {
        "exposed communication (% of step time)": 6.0,
        "scaling factor now, estimated (1 = ideal)": 0.95,
        "scaling factor at full line rate (1 = ideal)": 0.99,
    }
    assert metadata["exact figures (verdict table)"].value == {
        "exposed_comm_share": 0.05988858952686023, "estimated_sf": 0.9520342892008682, "full_rate_sf": 0.9871,
    }


def test_reanalysis_does_not_read_raw_traces(definitions, gloo_run, tmp_path):
    """The analysis assets run from the stored parse tables even once the raw inputs are gone."""
    landing = tmp_path / "landing"
    shutil.copytree(gloo_run, landing / "gloo-live")
    resource = WarehouseResource(root=str(tmp_path / "warehouse"), landing=str(landing))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("runs", ["gloo-live"])
    repository = definitions.get_repository_def()
    quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
    first = repository.get_job("ingest_job").execute_in_process(
        partition_key="gloo-live", instance=instance, resources={"warehouse": resource}, run_config=quiet
    )
    assert first.success
    shutil.rmtree(landing / "gloo-live")
    store = Warehouse(resource.root)
    events_before = sorted(p.stat().st_ino for p in (store.published("gloo-live") / "trace_events").iterdir())
    again = repository.get_job("reanalyze_job").execute_in_process(
        partition_key="gloo-live", instance=instance, resources={"warehouse": resource}, run_config=quiet
    )
    assert again.success
    # A new version was published, sharing (hard-linking) the same event files.
    assert sorted(p.stat().st_ino for p in (store.published("gloo-live") / "trace_events").iterdir()) == events_before


def test_dagster_cli_validates_the_workspace(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import REPO

    dagster = Path(sys.executable).parent / "dagster"
    result = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO, env={**os.environ, "DAGSTER_HOME": str(tmp_path)}, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0 and "All code locations passed validation" in result.stdout + result.stderr


def test_the_cli_writes_the_same_tables_with_and_without_dagster(tmp_path, monkeypatch):
    """Without DAGSTER_HOME the CLI runs the assets' stages directly; with it, it materialises the
    assets in that instance. Both warehouses hold the same rows in every table, and the instance
    has recorded every run's materialisations."""
    from conftest import TRACES, shared_trace_files, wirespeed
    from pipelines.warehouse.store import tables_differ

    paths = [str(p) for p in shared_trace_files()] + [str(TRACES / "hta_sampled_2rank")]
    home = _dagster_home(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    direct = wirespeed("ingest", *paths, "--warehouse", str(tmp_path / "direct"), "--quiet", env=env)
    dagster = wirespeed("ingest", *paths, "--warehouse", str(tmp_path / "dagster"), "--quiet", env={**env, "DAGSTER_HOME": str(home)})
    # A batch's warnings are printed as they are without Dagster, and nothing of Dagster's log.
    assert "parse issues" in direct.stderr and dagster.stderr == direct.stderr

    direct, through = Warehouse(tmp_path / "direct"), Warehouse(tmp_path / "dagster")
    runs = direct.run_ids()
    assert len(runs) == len(paths) and through.run_ids() == runs
    assert tables_differ(direct, through) == {}

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dg.DagsterInstance.get()
    try:
        for asset in ("trace_events", "step_breakdown", "whatif", "run_report"):
            assert instance.get_materialized_partitions(dg.AssetKey(asset)) == set(runs), asset
    finally:
        instance.dispose()


def test_a_real_daemon_ingests_run_folders_that_land():
    """The deployment path end to end: run folders land, `dagster-daemon` ticks the sensor, the
    queued runs ingest them, and every run's report is materialised (the daemon benchmark, small)."""
    import subprocess
    import sys

    from conftest import REPO

    result = subprocess.run(
        [sys.executable, "-m", "pipelines.testbed.bench.daemon", "--runs", "2", "--timeout", "300"],
        cwd=REPO, capture_output=True, text=True, timeout=400,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert "(1 Dagster run, 0 not successful)" in result.stdout  # two small runs: one batch


def test_a_failed_regression_check_is_handed_to_the_alert_command(definitions, tmp_path):
    """Two runs of one job through the ingest job, in a warehouse whose thresholds let any run
    regress (p up to 1, no least change), so the second run's no_regression check fails; the
    alert sensor runs the team's command once, with the run and what regressed on its stdin."""
    import sys

    from conftest import TRACES
    from pipelines.defs.reports.sensors import regression_alert_sensor

    landing, root, alerts = tmp_path / "landing", tmp_path / "warehouse", tmp_path / "alerts.jsonl"
    for index, name in enumerate(["first", "second"]):
        shutil.copytree(TRACES / "hta_sampled_2rank", landing / name / "traces")
        manifest = {"run_id": name, "job": "nightly", "world_size": 2, "started_ns": index + 1}
        (landing / name / "manifest.json").write_text(json.dumps(manifest))
        (landing / name / "_DONE").touch()
    root.mkdir()
    writer = f"import sys; open({str(alerts)!r}, 'a').write(sys.stdin.read() + chr(10))"
    (root / "wirespeed.toml").write_text(
        "[regressions]\nregression_p_max = 1.0\nstep_change_min = 0\nshare_change_min = 0\nbusbw_change_min = 0\n"
        f"alert_command = {json.dumps([sys.executable, '-c', writer])}\n"
    )
    resource = WarehouseResource(root=str(root), landing=str(landing))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("runs", ["first", "second"])
    job = definitions.get_repository_def().get_job("ingest_job")
    checks = {}
    for name in ("first", "second"):
        outcome = job.execute_in_process(partition_key=name, instance=instance, resources={"warehouse": resource},
                                         run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        checks[name] = {e.check_name: e for e in outcome.get_asset_check_evaluations()}["no_regression"]
    assert checks["first"].passed and not checks["second"].passed
    assert "step time" in checks["second"].description

    context = dg.build_sensor_context(instance=instance, resources={"warehouse": resource})
    tick = regression_alert_sensor(context)
    (finding,) = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert finding["run_id"] == "second" and {row["metric"] for row in finding["regressions"]} >= {"step time"}
    assert isinstance(tick, dg.SkipReason) and "second" in tick.skip_message
    # The next tick, from the cursor the first one left, has nothing new to hand on.
    assert regression_alert_sensor(context).skip_message == "no new regression"
    assert len(alerts.read_text().splitlines()) == 1


def test_the_sensor_looks_every_30_s_unless_told_otherwise():
    from pipelines.defs.ingest.sensors import sensor_interval_s

    assert landing_sensor.minimum_interval_seconds == sensor_interval_s({}) == 30
    assert sensor_interval_s({"WIRESPEED_SENSOR_INTERVAL_S": "5"}) == 5
    for bad in ("0", "5s", "-1", ""):
        with pytest.raises(ValueError, match="WIRESPEED_SENSOR_INTERVAL_S must be a whole number"):
            sensor_interval_s({"WIRESPEED_SENSOR_INTERVAL_S": bad})


def _dagster_home(tmp_path):
    """An instance folder as a user keeps one: configured (Dagster warns of a missing dagster.yaml)
    and telemetry off (else Dagster greets the folder's first use)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return home


def test_a_quiet_ingest_under_dagster_prints_the_results_and_warnings_only(tmp_path, monkeypatch):
    """A run materialised alone in the instance: `--quiet` prints its result line, and its warning
    after it as without Dagster, not Dagster's log line; the instance's event log still has it."""
    from conftest import TRACES, wirespeed

    trace = str(TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz")
    home = _dagster_home(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    direct = wirespeed("ingest", trace, "--warehouse", str(tmp_path / "direct"), "--quiet", env=env)
    dagster = wirespeed("ingest", trace, "--warehouse", str(tmp_path / "dagster"), "--quiet", env={**env, "DAGSTER_HOME": str(home)})
    assert [line.split("; report ")[0] for line in dagster.stdout.splitlines()] == [
        line.split("; report ")[0] for line in direct.stdout.splitlines()
    ]
    assert dagster.stderr == direct.stderr == "wirespeed ingest: nccl_data: 1 parse issues (0 errors); see the parse_issues table\n"

    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = dg.DagsterInstance.get()
    try:
        (run,) = instance.get_runs()
        logged = [(entry.level, entry.user_message) for entry in instance.all_logs(run.run_id) if entry.dagster_event is None]
    finally:
        instance.dispose()
    assert (logging.WARNING, "nccl_data: 1 parse issues (0 errors); see the parse_issues table") in logged
