"""Jobs over the per-run assets.

A run's assets follow one another (parse, analyse, report), so they run in one process: a process
per step would only load the code location again for each.
"""

import dagster as dg

# Everything for one run: parse its traces, analyse them, write its report.
ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.groups("ingest", "analysis", "reports"),
    description="Ingest one run partition: parse tables, analysis tables, report.",
    executor_def=dg.in_process_executor,
)

# After a change to the SQL or to the communication patterns: recompute without re-parsing.
reanalyze_job = dg.define_asset_job(
    "reanalyze_job",
    selection=dg.AssetSelection.groups("analysis", "reports"),
    description="Recompute a run's analysis tables and report from its stored parse tables.",
    executor_def=dg.in_process_executor,
)
