"""When the roll-ups are rebuilt."""

import dagster as dg

from pipelines.defs.rollups.assets import cross_run_tables, fleet_report

rollup_job = dg.define_asset_job("rollup_job", selection=[cross_run_tables, fleet_report])

hourly_rollups = dg.ScheduleDefinition(
    name="hourly_rollups",
    job=rollup_job,
    cron_schedule="0 * * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Rebuild the cross-run roll-ups (run summary, scaling, verdicts, regressions) and the fleet report every hour.",
)
