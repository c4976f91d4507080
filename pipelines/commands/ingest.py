"""Ingest runs from the command line: the stages of the Dagster assets, run in this process.

With DAGSTER_HOME set, the CLI materialises the assets themselves (same checks and resources),
so the runs are recorded in that instance and show up in the Dagster UI. Without it, it runs the
same stage functions directly (pipelines/stage_runner.py): no Dagster import, instance or run
machinery, which would be most of a small ingest's time. Either way the stages write the same
tables, and the cross-run roll-ups are updated for the runs just ingested (the schedule
otherwise rebuilds them whole), so a query right after an ingest sees their verdicts.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from pipelines import settings
from pipelines.read.sources import discover, run_id_for
from pipelines.folders import landing_dir
from pipelines.stage_runner import Directly, StagesRun
from pipelines.warehouse import rollups, sql
from pipelines.warehouse.store import Warehouse, check_run_id


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
    link_gbps: float | None = None  # the line rate the collectives were judged against
    utilization: float | None = None  # of that line rate, while the collectives moved data (verdict.utilization)
    full_rate_sf: float | None = None  # the what-if: scaling factor at full line rate
    estimated_sf: float | None = None  # the scaling factor now, measured as the what-if measures it
    regressions: list[str] = field(default_factory=list)  # what regressed against the job's baseline
    hang: str | None = None  # the Flight Recorders' first problem in words: why the job hung or desynced

    def describe(self) -> str:
        if not self.success:
            return f"{self.run_id}: FAILED: {self.error}"
        hang = f"{self.hang}; " if self.hang else ""
        share = f"exposed communication {self.exposed_comm_share:.1%} of step time" if self.exposed_comm_share is not None else ""
        share += f", mostly {self.waits_for}; " if share and self.waits_for else "; " if share else ""
        facts = []
        if self.utilization is not None:
            facts.append(f"the collectives used {self.utilization:.0%} of the {self.link_gbps:g} Gbit/s line rate")
        if self.full_rate_sf is not None:
            now = f"{self.estimated_sf:.2f} now, " if self.estimated_sf is not None else ""
            facts.append(f"scaling factor {now}{self.full_rate_sf:.2f} at full line rate")
        facts = "".join(f"; {fact}" for fact in facts)
        checks = f"; checks failed: {', '.join(self.failed_checks)}" if self.failed_checks else ""
        regressed = f"; REGRESSED: {'; '.join(self.regressions)}" if self.regressions else ""
        return f"{self.run_id}: {hang}{share}{self.bottleneck}{facts}{checks}{regressed}; report {self.report}"


class BarProgress:
    """Feeds ingest progress into a tqdm bar (the `ingest_progress` resource of the assets)."""

    def __init__(self, bar: tqdm):
        self.bar = bar

    def advance(self, nbytes: int) -> None:
        self.bar.update(nbytes)


def ingest_paths(
    paths: list[Path],
    warehouse_dir: Path,
    run_id: str | None = None,
    progress: bool = True,
    overrides: dict | None = None,
) -> list[IngestResult]:
    """Ingest each path as one run; a failing run does not stop the others.

    `overrides` (link_gbps, intra_link_gbps, link_interface) win over what the runs' manifests say,
    and step_annotation over wirespeed.toml's (see stages.run_settings).
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
    sizes = {}
    for name, path in runs:
        source = discover(path)
        sizes[name] = source.input_bytes
        store.register_source(name, path, overrides)
    runner = ThroughDagster(store, sizes) if os.environ.get("DAGSTER_HOME") else Directly(store, sizes)
    outcomes = {}
    with tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, desc="ingest", disable=not progress) as bar:
        for name, _ in runs:
            bar.set_postfix_str(name)
            outcomes[name] = runner.run(name, BarProgress(bar))
        runner.finish(outcomes)
    for outcome in outcomes.values():  # after the bar, not inside it
        for line in outcome.warnings:
            print(f"wirespeed ingest: {line}", file=sys.stderr)
    ingested = [name for name, outcome in outcomes.items() if outcome.error is None]
    con = store.connect(settings.load(store.root).duckdb_config(), runs=ingested, tables=("verdict", "regressions", "fr_mismatches"))
    try:
        return [_result(outcomes[name], name, path, store, con) for name, path in runs]
    finally:
        con.close()


class ThroughDagster:
    """The runs materialised in the instance at DAGSTER_HOME: small ones batched as the sensor
    batches them, each batch in one Dagster run of the batch job (a Dagster run costs seconds
    before it ingests anything), each other run in a Dagster run of its own assets (report
    included); then the roll-ups updated for the runs ingested alone."""

    def __init__(self, store: Warehouse, sizes: dict[str, int]):
        import dagster as dg

        from pipelines.defs.ingest.assets import analyzed_run, normalized_run
        from pipelines.defs.ingest.batches import ingest_batch_job, small_batches
        from pipelines.defs.partitions import runs_partitions
        from pipelines.defs.reports.assets import run_report
        from pipelines.defs.resources import WarehouseResource

        self.dg = dg
        self.assets = [normalized_run, analyzed_run, run_report]
        self.batch_job = ingest_batch_job
        self.store = store
        self.sizes = sizes
        self.batches = small_batches(sizes)
        self.batched = {name for batch in self.batches for name in batch}
        self.instance = dg.DagsterInstance.get()
        known = set(self.instance.get_dynamic_partitions(runs_partitions.name))
        self.instance.add_dynamic_partitions(runs_partitions.name, [n for n in sizes if n not in known])
        self.resource = WarehouseResource(root=str(store.root), landing=str(landing_dir()))
        self.progress: dict[str, BarProgress] = {}  # a batched run's, told once its batch is done

    def run(self, name: str, progress: BarProgress) -> StagesRun | None:
        """Materialise `name`'s assets now, or leave a batched run to `finish` (None)."""
        if name in self.batched:
            self.progress[name] = progress
            return None
        outcome = self.dg.materialize(
            self.assets,
            partition_key=name,
            instance=self.instance,
            resources={"warehouse": self.resource, "ingest_progress": progress},
            run_config=_SILENT,
            raise_on_error=False,
        )
        said = self._warnings(outcome.run_id)
        if not outcome.success:
            return StagesRun(_first_failure(outcome), [], warnings=said)
        return StagesRun(None, [e.check_name for e in outcome.get_asset_check_evaluations() if not e.passed], warnings=said)

    def finish(self, outcomes: dict[str, StagesRun | None]) -> None:
        for batch in self.batches:
            outcomes.update(self._batch(batch))
        alone = [name for name, outcome in outcomes.items() if outcome.error is None and name not in self.batched]
        if alone:  # a batch updates its runs' roll-ups itself
            rollups.update(self.store, settings.load(self.store.root), alone)

    def _batch(self, batch: list[str]) -> dict[str, StagesRun]:
        """One batch in one Dagster run; each run's outcome from the checks and the failures it recorded."""
        result = self.batch_job.execute_in_process(
            run_config={**_SILENT, "ops": {"ingest_runs": {"config": {"run_ids": batch}}}},
            instance=self.instance,
            resources={"warehouse": self.resource},
            raise_on_error=False,
        )
        for name in batch:
            self.progress[name].advance(self.sizes[name])
        errors = {}
        if not result.success:
            failure = result.get_step_failure_events()[0].event_specific_data
            recorded = failure.user_failure_data.metadata.get("errors") if failure.user_failure_data else None
            errors = recorded.value if recorded is not None else dict.fromkeys(batch, _first_failure(result))
        # From the instance: a failed step's result leaves out the events its op recorded.
        logged = self.instance.all_logs(result.run_id, of_type=self.dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        checks = [entry.dagster_event.event_specific_data for entry in logged]
        runs = {
            name: StagesRun(errors[name].splitlines()[0], []) if name in errors
            else StagesRun(None, [e.check_name for e in checks if e.partition == name and not e.passed])
            for name in batch
        }
        for line in self._warnings(result.run_id):  # a stage names its run first; any other line goes with the first run
            named = [name for name in batch if line.startswith(f"{name}: ")]
            runs[named[0] if named else batch[0]].warnings.append(line)
        return runs

    def _warnings(self, dagster_run_id: str) -> list[str]:
        """The warnings logged in a Dagster run, read back from the instance's event log."""
        return [
            entry.user_message for entry in self.instance.all_logs(dagster_run_id)
            if entry.dagster_event is None and entry.level >= logging.WARNING
        ]


# Dagster's console logger prints nothing: the instance's event log keeps every line (the UI shows
# them), and the runs' warnings are printed after the progress bar, as they are without Dagster.
_SILENT = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _first_failure(result) -> str:
    """The first line of what raised in a failed Dagster run's first failed step (not Dagster's wrapper)."""
    failures = result.get_step_failure_events()
    if not failures:
        return "the run failed"
    error = failures[0].event_specific_data.error
    while error.cause is not None:
        error = error.cause
    return error.message.strip().splitlines()[0]


def _result(outcome: StagesRun, run_id: str, path: Path, store: Warehouse, con) -> IngestResult:
    """The run's result line, with its verdict and regressions read from the roll-ups in session `con`."""
    if outcome.error is not None:
        return IngestResult(run_id, path, False, outcome.error)
    sql.set_variables(con, run_id=run_id)
    verdict = sql.report_rows(con, "verdict")[0]
    share = verdict["exposed_comm_share"] if verdict["bottleneck"] not in ("no communication found", "no traces") else None
    link = {"inter": " over the network", "intra": " within a host"}.get(verdict["dominant_scope"], "")
    waits_for = f"{verdict['dominant_dimension']}{link}" if verdict["dominant_dimension"] else None
    regressed = [row["summary"] for row in sql.report_rows(con, "regressions") if row["regressed"]]
    return IngestResult(
        run_id, path, True, None, outcome.failed_checks, share, verdict["bottleneck"], store.report_path(run_id), waits_for,
        verdict["link_gbps"], verdict["utilization"], verdict["full_rate_sf"], verdict["estimated_sf"], regressed,
        _hang(sql.report_rows(con, "fr_verdict")),
    )


def _hang(rows: list[dict]) -> str | None:
    """The Flight Recorders' verdict for the result line: HANG (a rank missing, a collective stuck) or MISMATCH."""
    if not rows:
        return None
    (first,) = rows
    label = "HANG" if first["problem"] in ("rank missing", "stuck") else "MISMATCH"
    more = f" (and {first['problems'] - 1} more problems in fr_mismatches)" if first["problems"] > 1 else ""
    return f"{label}: {first['verdict']}{more}"
