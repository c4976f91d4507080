"""Jobs over the per-run assets, and where their steps run.

On one machine a run's steps follow one another in one process: a process per step would only
load the code location again for each. A deployment with workers (deploy/, docs/architecture.md)
sets WIRESPEED_EXECUTOR=celery, and each step becomes a Celery task that any worker may take, so
one run's parse shards and many runs' ingests spread over the workers.
"""

import os

import dagster as dg


def ingest_executor() -> dg.ExecutorDefinition:
    """In one process; on the deployment's Celery workers (broker and results backend from
    WIRESPEED_CELERY_BROKER and WIRESPEED_CELERY_BACKEND) where WIRESPEED_EXECUTOR=celery."""
    executor = os.environ.get("WIRESPEED_EXECUTOR", "in_process")
    if executor == "in_process":
        return dg.in_process_executor
    if executor == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured(
            {"broker": {"env": "WIRESPEED_CELERY_BROKER"}, "backend": {"env": "WIRESPEED_CELERY_BACKEND"}}
        )
    raise ValueError(f"WIRESPEED_EXECUTOR={executor!r}: it is 'in_process' (the default) or 'celery'")


# Everything for one run: parse its traces, analyse them, write its report.
ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.groups("ingest", "analysis", "reports"),
    description="Ingest one run partition: parse tables, analysis tables, report.",
    executor_def=ingest_executor(),
)

# After a change to the SQL or to the communication patterns: recompute without re-parsing.
reanalyze_job = dg.define_asset_job(
    "reanalyze_job",
    selection=dg.AssetSelection.groups("analysis", "reports"),
    description="Recompute a run's analysis tables and report from its stored parse tables.",
    executor_def=dg.in_process_executor,
)
