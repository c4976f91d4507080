"""The hook a team alerts on: each run whose `no_regression` check failed, handed to their command."""

import json
import subprocess

import dagster as dg

from pipelines import stages
from pipelines.defs.resources import WarehouseResource

CHECK = dg.AssetCheckKey(dg.AssetKey("run_report"), "no_regression")
# A tick reads at most this many of the check's latest evaluations.
MAX_EVALUATIONS_PER_TICK = 100
ALERT_TIMEOUT_S = 60


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def regression_alert_sensor(context: dg.SensorEvaluationContext, warehouse: WarehouseResource) -> dg.SkipReason:
    """For each run whose `no_regression` check failed since the last tick, run wirespeed.toml's
    [regressions] alert_command with what regressed as JSON on its standard input (or log it)."""
    store, settings = warehouse.open(), warehouse.settings()
    seen = int(context.cursor) if context.cursor else 0
    history = context.instance.event_log_storage.get_asset_check_execution_history(CHECK, limit=MAX_EVALUATIONS_PER_TICK)
    new = sorted((record for record in history if record.id > seen and record.event is not None), key=lambda r: r.id)
    alerted = []
    for record in new:
        evaluation = record.event.dagster_event.event_specific_data
        if evaluation.passed:
            continue
        run_id = record.partition or context.instance.get_run_by_id(record.run_id).tags.get("dagster/partition")
        regressed = [row for row in stages.judgement(store, settings, run_id)[1] if row["regressed"]]
        finding = {"run_id": run_id, "description": evaluation.description, "regressions": regressed}
        if not settings.regression_alert_command:
            context.log.warning(f"{run_id} {evaluation.description} (set [regressions] alert_command to be told)")
        else:
            _alert(context, settings.regression_alert_command, finding)
        alerted.append(run_id)
    if new:
        context.update_cursor(str(new[-1].id))
    return dg.SkipReason(f"regressed: {', '.join(alerted)}" if alerted else "no new regression")


def _alert(context: dg.SensorEvaluationContext, command: tuple[str, ...], finding: dict) -> None:
    try:
        done = subprocess.run(list(command), input=json.dumps(finding, default=str), text=True, capture_output=True,
                              timeout=ALERT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as problem:
        context.log.warning(f"alert_command for {finding['run_id']} did not run: {problem}")
        return
    if done.returncode != 0:
        context.log.warning(f"alert_command for {finding['run_id']} exited {done.returncode}: {done.stderr[-500:]}")
