"""The three stages of ingesting one run, as plain functions: parse, analyse, report.

The Dagster assets (pipelines/defs/) are thin wrappers that run these and turn their outcomes
into materialisations and check results; their parse runs as a plan, shards and a finish, so
that several workers can parse one run's trace files. `wirespeed ingest` runs the same functions
directly when no Dagster instance is configured, which spares a user Dagster's start-up and run
machinery; both paths write the same tables.
"""

from __future__ import annotations

import importlib
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipelines import checks
from pipelines.parse import tables as parse_tables
from pipelines.parse.tables import ParseSummary, parse_run
from pipelines.read.sources import RunSource, discover
from pipelines.settings import Settings
from pipelines.warehouse import rollups, sql
from pipelines.warehouse.store import ANALYSIS_TABLES, PARSE_TABLES, Warehouse, open_version


class StageError(Exception):
    """A stage cannot run for this run (no inputs, not parsed yet); the message says why."""


@dataclass
class StageOutcome:
    """What a stage wrote: metadata per table, check verdicts, and lines worth logging."""

    tables: dict[str, dict]
    verdicts: list[checks.Verdict]
    info: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def run_source(store: Warehouse, landing: Path, run_id: str) -> RunSource:
    """Where a run's raw inputs are: as registered by `wirespeed ingest`, else in the landing folder."""
    registered = store.source_of(run_id)
    if registered is not None:
        path, overrides = registered
        source = discover(path, run_id)
        source.overrides = overrides
        return source
    landing = landing.absolute()
    candidate = landing / run_id
    if "/" in run_id or run_id in (".", "..") or candidate.resolve().parent != landing.resolve():
        raise StageError(f"run id {run_id!r} does not name a folder of the landing folder {landing}")
    return discover(candidate, run_id)


def run_settings(store: Warehouse, settings: Settings, run_id: str) -> Settings:
    """The settings a run's stages work with: the warehouse's, but for the step annotation given
    to `wirespeed ingest` for this run, which wins over wirespeed.toml's. It is kept with the
    run's registered source, so a Dagster re-run of the run's assets finds the same steps."""
    registered = store.source_of(run_id)
    annotation = registered[1].get("step_annotation") if registered else None
    return replace(settings, step_annotation=annotation) if annotation else settings


def parse(
    store: Warehouse, settings: Settings, landing: Path, run_id: str, key: str, progress, publish: bool
) -> StageOutcome:
    """Read the run's raw inputs into the parse tables of staging version `key`, in this process.

    `publish` makes that version the run's published one at once, for when no analysis follows.
    """
    # The analysis' modules (numpy among them: a sixth of a second) load while DuckDB parses.
    threading.Thread(target=importlib.import_module, args=("pipelines.analysis.tables",), daemon=True).start()
    source = run_source(store, landing, run_id)
    settings = run_settings(store, settings, run_id)
    version = store.start_version(run_id, key, carry_tables=())
    summary = parse_run(source, version, store, settings, progress)
    return _parsed(store, settings, source, version, summary, publish)


# The parse of a run as separate steps, which a Dagster run may spread over workers that share
# the warehouse's folder: plan its shards, parse each, then finish (see pipelines/parse/tables.py).

def plan_parse(store: Warehouse, settings: Settings, landing: Path, run_id: str, key: str) -> list[list[int]]:
    """The shards of trace files (indices) that `parse_shard` parses, about `shard_mb` each."""
    source = run_source(store, landing, run_id)
    version = store.start_version(run_id, key, carry_tables=())
    return parse_tables.start_parse(source, version, settings.shard_mb * 1024 * 1024)


def parse_shard(
    store: Warehouse, settings: Settings, landing: Path, run_id: str, key: str, shard: int, files: list[int], progress,
) -> dict:
    """Parse one shard of the plan into staging version `key`; returns its record (host, seconds)."""
    source = run_source(store, landing, run_id)
    try:
        return parse_tables.parse_shard(source, store.staging(run_id, key), settings, shard, files, progress)
    except ValueError as problem:  # the run's files changed since the plan
        raise StageError(str(problem)) from problem


def finish_parse(
    store: Warehouse, settings: Settings, landing: Path, run_id: str, key: str, progress, publish: bool
) -> StageOutcome:
    """The rest of the parse once every shard is parsed: what `parse` returns."""
    source = run_source(store, landing, run_id)
    settings = run_settings(store, settings, run_id)
    version = store.staging(run_id, key)
    try:
        summary = parse_tables.finish_parse(source, version, store, settings, progress)
    except ValueError as problem:
        raise StageError(str(problem)) from problem
    return _parsed(store, settings, source, version, summary, publish)


def _parsed(
    store: Warehouse, settings: Settings, source: RunSource, version: Path, summary: ParseSummary, publish: bool
) -> StageOutcome:
    """The parse stage's outcome: its tables' rows, the parse checks, its lines."""
    run_id = source.run_id
    info = [f"{run_id}: {summary.files} trace files, {summary.ranks} ranks, {summary.events} events in {summary.seconds:.1f} s"]
    info += [f"{issue.where()}: {issue.reason}" for issue in summary.issues]
    warnings = []
    if summary.issues:
        errors = sum(1 for issue in summary.issues if issue.severity == "error")
        warnings.append(f"{run_id}: {len(summary.issues)} parse issues ({errors} errors); see the parse_issues table")
    con = open_version(version, settings, run_id, PARSE_TABLES)
    try:
        counted = con.execute("SELECT " + ", ".join(f'(SELECT count(*) FROM "{name}")' for name in PARSE_TABLES)).fetchall()[0]
        counts = dict(zip(PARSE_TABLES, counted))
        verdicts = [checks.judge(check, con) for check in checks.PARSE_CHECKS]
    finally:
        con.close()
    checks.keep(version, "parse", verdicts)
    if publish:
        store.publish(run_id, version)
    tables = {
        name: {"dagster/row_count": counts[name], "source": str(source.path), "version": str(version)}
        for name in PARSE_TABLES
    }
    return StageOutcome(tables, verdicts, info, warnings)


def analyze(store: Warehouse, settings: Settings, run_id: str, key: str) -> StageOutcome:
    """Build the analysis tables into staging version `key` and publish it.

    The version's parse tables are those the parse stage wrote under the same key, or else links
    to the published ones, so re-analysing a run never re-reads a raw trace.
    """
    from pipelines.analysis.tables import analyze_run

    if not store.staging(run_id, key).exists() and store.published(run_id) is None:
        raise StageError(f"run {run_id!r} has not been ingested: materialize its parse tables first")
    version = store.start_version(run_id, key, carry_tables=PARSE_TABLES + (checks.CHECKS_DIR,))
    summary = analyze_run(run_id, version, store, run_settings(store, settings, run_id), _judge_analysis)
    verdicts, exposed = summary.finished
    checks.keep(version, "analysis", verdicts)
    store.publish(run_id, version)
    tables = {name: {"dagster/row_count": summary.rows[name]} for name in ANALYSIS_TABLES}
    if exposed is not None:
        tables["step_breakdown"]["exposed_comm_share"] = float(exposed)
    return StageOutcome(tables, verdicts, [f"{run_id}: analysis in {summary.seconds:.1f} s: {summary.rows}"])


def _judge_analysis(con) -> tuple[list[checks.Verdict], float | None]:
    """The analysis checks' verdicts and the exposed share, in the analysis' own session."""
    verdicts = [checks.judge(check, con) for check in checks.ANALYSIS_CHECKS]
    exposed = con.execute("SELECT sum(exposed_comm_ns) / nullif(sum(step_ns), 0) FROM step_breakdown").fetchall()[0][0]
    return verdicts, exposed


def judgement(store: Warehouse, settings: Settings, run_id: str) -> tuple[dict, list[dict]]:
    """The run's verdict row (sql/verdict.sql) and its regressions against its job's baseline
    (sql/regressions.sql), recomputed over it and its job mates."""
    con = rollups.session(store, settings, rollups.job_mates(store, settings, [run_id]))
    try:
        rollups.recompute(con)
        sql.set_variables(con, run_id=run_id)
        return sql.report_rows(con, "verdict")[0], sql.report_rows(con, "regressions")
    finally:
        con.close()


def report(store: Warehouse, settings: Settings, run_id: str, verdicts=None, stored_rollups: bool | Future = False) -> Path:
    """Write the run's HTML report into the warehouse (see report_run); imported late, as only this stage draws."""
    from pipelines.report import report_run

    return report_run(store, settings, run_id, verdicts=verdicts, stored_rollups=stored_rollups)
