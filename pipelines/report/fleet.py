"""The fleet report: every job's runs over time, their regressions and their scaling, one HTML file.

Like a run's report it is standalone and offline, and every figure comes from one query, here of
`sql/fleet/`, over the roll-ups (verdict, scaling, regressions) and the runs.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from pipelines.report import write
from pipelines.report.page import Page, paragraph, table
from pipelines.settings import Settings
from pipelines.warehouse import rollups, sql
from pipelines.warehouse.store import Warehouse

# Runs per job drawn in the trends: the latest ones.
MAX_FLEET_RUNS = 500
FLEET_FILE = "fleet.html"


def render_fleet(con: duckdb.DuckDBPyConnection) -> str:
    """The fleet report's HTML, from a roll-up session over every run."""
    sql.set_variables(con, max_fleet_runs=MAX_FLEET_RUNS)
    jobs = sql.query_rows(con, "fleet/jobs")
    page = Page("wirespeed fleet report", f"{len(jobs)} job{'s' if len(jobs) != 1 else ''} with a job tag")
    page.add("Jobs", table(jobs, {"latest_exposed_share": ".1%"},
                           "No run has a job tag (wirespeed collect --job NAME), so there is no job to follow."))
    runs = sql.query_rows(con, "fleet/runs")
    if runs:
        note = f"The latest {MAX_FLEET_RUNS} runs of each job are drawn." if any(j["runs"] > MAX_FLEET_RUNS for j in jobs) else ""
        charts = page.chart("fleet_verdicts", {"fleet_runs": runs}) + page.chart("fleet_trend", {"fleet_runs": runs})
        page.add("Each job over time", charts + (paragraph(note) if note else ""))
        regressed = [{k: row[k] for k in ("job", "run_id", "ranks", "regressed")} for row in runs if row["has_regressed"]]
        page.add("Regressions", table(regressed, empty="No run regressed against its job's baseline (docs/compare.md)."))
    scaling = sql.query_rows(con, "fleet/scaling")
    page.add(
        "Scaling across rank counts",
        page.chart("fleet_scaling", {"fleet_scaling": scaling}) if scaling
        else paragraph("No job has runs of more than one size, so there is no scaling curve to draw."),
    )
    return page.render()


def report_fleet(store: Warehouse, settings: Settings, target: Path | None = None) -> Path:
    """Write the fleet report from the stored roll-ups (by default into the warehouse's reports)."""
    con = rollups.session(store, settings, queries=[sql.query_text(f"fleet/{name}") for name in ("jobs", "runs", "scaling")])
    try:
        html = render_fleet(con)
    finally:
        con.close()
    target = target or store.reports_dir / FLEET_FILE
    write(html, target)
    return target
