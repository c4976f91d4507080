"""When the roll-ups are rebuilt."""

import dagster as dg

from pipelines.defs.rollups.assets import run_summary

rollup_job = dg.define_asset_job("rollup_job", selection=[run_summary])

hourly_rollups = dg.ScheduleDefinition(
    name="hourly_rollups",
    job=rollup_job,
    cron_schedule="0 * * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Rebuild the cross-run roll-ups every hour.",
)
