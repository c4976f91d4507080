"""Data-quality checks on one version of one run, as plain queries returning verdicts.

The Dagster assets turn each `Verdict` into an asset check result; the report shows the same
verdicts, so a user sees one story wherever they look. Each stage keeps its verdicts in the
version it builds (`_checks/<stage>.json`): a version never changes, so neither do they, and a
report of the run reads them instead of judging its tables again.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import duckdb


@dataclass
class Outcome:
    passed: bool
    summary: str
    metadata: dict = field(default_factory=dict)


@dataclass
class Verdict:
    name: str
    table: str
    outcome: Outcome


def judge(check, con: duckdb.DuckDBPyConnection) -> Outcome:
    """Run one check function and name its outcome."""
    return Verdict(check.__name__, check.table, check(con))


def _one(con: duckdb.DuckDBPyConnection, query: str) -> tuple:
    return con.execute(query).fetchall()[0]


def check_on(table: str):
    """Mark a check function with the table it judges."""

    def mark(function):
        function.table = table
        return function

    return mark


@check_on("ranks")
def ranks_match_world_size(con: duckdb.DuckDBPyConnection) -> Outcome:
    """Every rank of the job has a trace."""
    world_size, world_source, found = _one(con, "SELECT world_size, world_size_source, ranks_found FROM runs")
    present = {row[0] for row in con.execute("SELECT DISTINCT rank FROM ranks").fetchall()}
    missing = [r for r in range(world_size or 0) if r not in present]
    passed = found == world_size and not missing
    summary = (
        f"all {world_size} ranks have a trace"
        if passed
        else f"{found} of {world_size} ranks have a trace (world size from {world_source})"
    )
    return Outcome(passed, summary,
        {"world_size": world_size, "ranks_found": found, "missing_ranks": str(missing[:32])},
    )


@check_on("trace_events")
def no_negative_durations(con: duckdb.DuckDBPyConnection) -> Outcome:
    """No trace event has a negative duration."""
    negative, untimed, overlong = _one(
        con,
        """
        SELECT count(*) FILTER (WHERE dur_ns < 0),
               count(*) FILTER (WHERE ts_ns IS NULL),
               count(*) FILTER (WHERE dur_ns > getvariable('max_dur_ns'))
        FROM trace_events
        """,
    )
    passed = negative == 0
    summary = "no event has a negative duration" if passed else f"{negative} events have a negative duration and were left out"
    return Outcome(passed, summary,
        {"negative_durations": negative, "events_without_time": untimed, "durations_over_7_days": overlong},
    )


@check_on("parse_issues")
def no_skipped_data(con: duckdb.DuckDBPyConnection) -> Outcome:
    """Ingestion skipped nothing (see parse_issues for what it did skip)."""
    errors, warnings = _one(
        con,
        "SELECT count(*) FILTER (WHERE severity = 'error'), count(*) FILTER (WHERE severity = 'warning') FROM parse_issues",
    )
    passed = errors == 0
    summary = "nothing was skipped" if passed else f"{errors} problems made ingestion skip data (see parse_issues)"
    return Outcome(passed, summary, {"errors": errors, "warnings": warnings})


@check_on("steps")
def steps_found(con: duckdb.DuckDBPyConnection) -> Outcome:
    """Every rank has steps (ProfilerStep annotations, or the step annotation chosen), so per-step figures exist."""
    rows = con.execute(
        "SELECT r.rank, count(s.step) FROM (SELECT DISTINCT rank FROM ranks) AS r "
        "LEFT JOIN steps AS s USING (rank) GROUP BY r.rank ORDER BY r.rank"
    ).fetchall()
    (annotation,) = _one(con, "SELECT getvariable('step_annotation')")
    steps = f"instances of the step annotation {annotation!r}" if annotation else "ProfilerStep annotations"
    without = [rank for rank, n in rows if n == 0]
    passed = bool(rows) and not without
    if passed:
        summary = f"{min(n for _, n in rows)} to {max(n for _, n in rows)} steps ({steps}) per rank"
    else:
        summary = f"ranks {without[:16]} have no {steps}: only whole-trace figures (rank_breakdown) exist for them"
        if not annotation:
            summary += "; --step-annotation or wirespeed.toml [steps] can make another annotation the step"
    return Outcome(passed, summary, {"ranks_without_steps": str(without[:32])})


@check_on("collectives")
def communication_found(con: duckdb.DuckDBPyConnection) -> Outcome:
    """Communication was found on every rank."""
    rows = con.execute(
        "SELECT r.rank, count(c.rank) FROM (SELECT DISTINCT rank FROM ranks) AS r "
        "LEFT JOIN collectives AS c USING (rank) GROUP BY r.rank ORDER BY r.rank"
    ).fetchall()
    without = [rank for rank, n in rows if n == 0]
    passed = bool(rows) and not without
    if passed:
        summary = f"{sum(n for _, n in rows)} collective instances found"
    else:
        summary = (
            f"no communication found on ranks {without[:16]}: neither collective metadata nor a name pattern "
            "matched. If the run communicates through custom kernels, add their names to "
            "[communication] patterns in wirespeed.toml"
        )
    return Outcome(passed, summary, {"ranks_without_communication": str(without[:32])})


@check_on("step_breakdown")
def breakdown_adds_up(con: duckdb.DuckDBPyConnection) -> Outcome:
    """step = compute + exposed communication + other + idle on every row."""
    bad, total = _one(
        con,
        "SELECT count(*) FILTER (WHERE step_ns <> compute_ns + exposed_comm_ns + other_ns + idle_ns), count(*) FROM step_breakdown",
    )
    passed = bad == 0
    summary = f"step = compute + exposed communication + other + idle on all {total} rows" if passed else f"{bad} rows do not add up"
    return Outcome(passed, summary, {"rows": total, "rows_not_adding_up": bad})


@check_on("step_comm_groups")
def exposure_attributed(con: duckdb.DuckDBPyConnection) -> Outcome:
    """Each step's exposed communication is shared out among its process groups exactly."""
    bad, total = _one(
        con,
        """
        SELECT count(*) FILTER (WHERE b.exposed_comm_ns <> coalesce(g.exposed_comm_ns, 0)), count(*)
        FROM step_breakdown AS b
        LEFT JOIN (
            SELECT rank, step, sum(exposed_comm_ns) AS exposed_comm_ns FROM step_comm_groups GROUP BY rank, step
        ) AS g USING (rank, step)
        """,
    )
    passed = bad == 0
    summary = (
        f"the process groups' exposed communication adds up to each step's on all {total} steps"
        if passed
        else f"on {bad} of {total} steps the process groups' exposed communication does not add up to the step's"
    )
    return Outcome(passed, summary, {"steps": total, "steps_not_adding_up": bad})


@check_on("fr_mismatches")
def collectives_agree_across_ranks(con: duckdb.DuckDBPyConnection) -> Outcome:
    """Every rank entered every collective of its groups, and called it as the others did (Flight Recorder)."""
    dumps, problems = _one(con, "SELECT (SELECT count(*) FROM fr_dumps), (SELECT count(*) FROM fr_mismatches)")
    if not problems:
        summary = (
            f"the {dumps} Flight Recorder dumps agree: no rank missed a collective or called it differently"
            if dumps else "the run has no Flight Recorder dumps to compare"
        )
        return Outcome(True, summary, {"dumps": dumps, "problems": 0})
    (first,) = con.execute(
        "SELECT verdict FROM fr_mismatches ORDER BY NOT is_first, first_created_ns, pg_name, seq_id LIMIT 1"
    ).fetchall()[0]
    more = f" ({problems - 1} more in fr_mismatches)" if problems > 1 else ""
    return Outcome(False, f"{first}{more}", {"dumps": dumps, "problems": problems})


PARSE_CHECKS = (ranks_match_world_size, no_negative_durations, no_skipped_data)
ANALYSIS_CHECKS = (steps_found, communication_found, breakdown_adds_up, exposure_attributed, collectives_agree_across_ranks)

CHECKS_DIR = "_checks"  # in a version: each stage's verdicts
STAGES = ("parse", "analysis")  # whose verdicts a version keeps, PARSE_CHECKS' then ANALYSIS_CHECKS'


def keep(version: Path, stage: str, verdicts: list[Verdict]) -> None:
    """Write a stage's verdicts into its version; replaced, never written through (a carried one is a link)."""
    target = version / CHECKS_DIR / f"{stage}.json"
    target.parent.mkdir(exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    temporary.write_text(json.dumps([asdict(verdict) for verdict in verdicts], default=str))
    os.replace(temporary, target)


def kept(version: Path) -> list[Verdict] | None:
    """Every stage's verdicts kept in a version, in the stages' order; None unless all are there."""
    files = [version / CHECKS_DIR / f"{stage}.json" for stage in STAGES]
    if not all(file.exists() for file in files):
        return None
    return [
        Verdict(entry["name"], entry["table"], Outcome(**entry["outcome"]))
        for file in files for entry in json.loads(file.read_text())
    ]
