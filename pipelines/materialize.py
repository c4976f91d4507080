"""Ingest runs from the command line by materialising the Dagster assets in this process.

The CLI runs exactly what the scheduled pipeline runs (the same assets, checks and resources),
only in-process and on the paths it is given, registered as dynamic partitions first. With
DAGSTER_HOME set the runs are recorded in that instance and show up in the Dagster UI; without it
they use a throwaway in-memory instance. Afterwards it rebuilds the cross-run roll-ups (which the
schedule otherwise does hourly), so a query right after an ingest sees its verdict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from tqdm import tqdm

from pipelines import rollups, settings, sql
from pipelines.defs.ingest.assets import analyzed_run, normalized_run
from pipelines.defs.partitions import runs_partitions
from pipelines.defs.reports.assets import run_report
from pipelines.defs.resources import IngestProgress, WarehouseResource
from pipelines.sources import discover, run_id_for
from pipelines.warehouse import Warehouse, check_run_id

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class IngestResult:
    run_id: str
    path: Path
    success: bool
    error: str | None = None
    failed_checks: list[str] = field(default_factory=list)
    exposed_comm_share: float | None = None
    bottleneck: str | None = None
    report: Path | None = None
    waits_for: str | None = None  # the dimension and link most of the exposed time waited for

    def describe(self) -> str:
        if not self.success:
            return f"{self.run_id}: FAILED: {self.error}"
        share = f"exposed communication {self.exposed_comm_share:.1%} of step time" if self.exposed_comm_share is not None else ""
        share += f", mostly {self.waits_for}; " if share and self.waits_for else "; " if share else ""
        checks = f"; checks failed: {', '.join(self.failed_checks)}" if self.failed_checks else ""
        return f"{self.run_id}: {share}{self.bottleneck}{checks}; report {self.report}"


class BarProgress(IngestProgress):
    """Feeds ingest progress into a tqdm bar."""

    def __init__(self, bar: tqdm):
        self.bar = bar

    def advance(self, nbytes: int) -> None:
        self.bar.update(nbytes)


def instance() -> dg.DagsterInstance:
    return dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()


def ingest_paths(
    paths: list[Path],
    warehouse_dir: Path,
    run_id: str | None = None,
    progress: bool = True,
    overrides: dict | None = None,
) -> list[IngestResult]:
    """Ingest each path as one run; a failing run does not stop the others.

    `overrides` (link_gbps, intra_link_gbps, link_interface) win over what the runs' manifests say.
    """
    runs = [(run_id or run_id_for(path), path) for path in paths]
    for name, path in runs:
        problem = check_run_id(name)
        if problem:
            raise ValueError(f"{path}: run id {name!r} cannot be used: {problem}; pass --run-id")
    names = [name for name, _ in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"two paths would get the same run id: {sorted(n for n in names if names.count(n) > 1)}")
    store = Warehouse(warehouse_dir)
    store.ensure()
    dagster = instance()
    known = set(dagster.get_dynamic_partitions(runs_partitions.name))
    dagster.add_dynamic_partitions(runs_partitions.name, [n for n in names if n not in known])
    total = 0
    for _, path in runs:
        source = discover(path)
        total += sum(p.stat().st_size for p in source.trace_files + source.nccl_log_files if p.exists())
    resource = WarehouseResource(root=str(store.root), landing=os.environ.get("WIRESPEED_LANDING", "landing"))
    results = []
    with tqdm(total=total, unit="B", unit_scale=True, desc="ingest", disable=not progress) as bar:
        for name, path in runs:
            store.register_source(name, path, overrides)
            bar.set_postfix_str(name)
            outcome = dg.materialize(
                [normalized_run, analyzed_run, run_report],
                partition_key=name,
                instance=dagster,
                resources={"warehouse": resource, "ingest_progress": BarProgress(bar)},
                run_config=QUIET_LOGS,
                raise_on_error=False,
            )
            results.append(_result(outcome, name, path, store))
    rollups.publish(store, settings.load(store.root))
    return results


def _result(outcome: dg.ExecuteInProcessResult, run_id: str, path: Path, store: Warehouse) -> IngestResult:
    if not outcome.success:
        failures = outcome.get_step_failure_events()
        error = failures[0].event_specific_data.error.message.strip() if failures else "the run failed"
        return IngestResult(run_id, path, False, error.splitlines()[0])
    failed = [e.check_name for e in outcome.get_asset_check_evaluations() if not e.passed]
    con = rollups.session(store, settings.load(store.root))
    try:
        rollups.recompute(con)
        sql.set_variables(con, run_id=run_id)
        relation = con.sql(sql.report_query("verdict"))
        verdict = dict(zip(relation.columns, relation.fetchall()[0], strict=True))
    finally:
        con.close()
    share = verdict["exposed_comm_share"] if verdict["bottleneck"] not in ("no communication found", "no traces") else None
    link = {"inter": " over the network", "intra": " within a host"}.get(verdict["dominant_scope"], "")
    waits_for = f"{verdict['dominant_dimension']}{link}" if verdict["dominant_dimension"] else None
    return IngestResult(run_id, path, True, None, failed, share, verdict["bottleneck"], store.report_path(run_id), waits_for)
