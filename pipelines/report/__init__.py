"""A run's report: one standalone HTML file that answers "how much of my step is exposed communication?".

Every number on it comes from one published table, through one query in `sql/report/`.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from pathlib import Path

from pipelines import checks
from pipelines.checks import Verdict
from pipelines.report.page import Page, paragraph, table, text
from pipelines.settings import Settings
from pipelines.warehouse import rollups, sql
from pipelines.warehouse.store import ROLLUP_TABLES, TABLES, Warehouse, open_version

# Every query a report runs (sql.report_rows), and so every table its session needs.
REPORT_QUERIES = sql.SQL_DIR / "report"
# Queries that read what the page learns from another query's rows: run when asked, not ahead.
ASKED_LATER = {"step_stretches", "critical_path_points"}
MAX_STRETCHES = 20_000
MAX_POINTS = 1_500
MAX_STEPS = 200
# The steps the timeline's selector offers; the stretches are shared out among them.
MAX_TIMELINE_STEPS = 40
# Facet at most this many ranks side by side; beyond it ranks become rows of one chart.
MAX_FACETED_RANKS = 16
# Charts with a bar per step fill this many pixels, their bars 4 to 40 pixels wide; facets
# share it, at most four abreast.
PAGE_PX = 900
MIN_BAR_PX, MAX_BAR_PX = 4, 40
# Pixels a facet or chart takes besides its bars (axis, labels).
AXIS_PX = 70


class ReportQueries:
    """The report's queries over a shared session, `threads` at a time, each on a connection of
    its thread: most of a small query's time is DuckDB planning it on one core. `start` runs
    queries ahead of the page asking for their rows, with more than one thread (with one, a
    query the page turns out not to need would only cost time); `rows` waits for them.

    While `rollups_updated` is not done, the stored roll-ups of `store` are being updated for the
    run: the queries that read them start last, so the others run meanwhile, and wait for it."""

    def __init__(
        self, shared: sql.SharedSession, threads: int, rollups_updated: Future | None = None, store: Warehouse | None = None,
    ):
        self.shared = shared
        self._ahead = threads > 1
        self._pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="wirespeed-report")
        self._started: dict[str, Future] = {}
        self._rollups_updated = rollups_updated
        self._store = store
        self._waiting = threading.Lock()

    def set_variables(self, **values) -> None:
        """Variables for the queries started from now on."""
        self.shared.set_variables(**values)

    def start(self, names) -> None:
        if self._rollups_updated is not None:
            names = sorted(names, key=reads_rollups)
        for name in names if self._ahead else ():
            self._started[name] = self._pool.submit(self._run, name)

    def rows(self, name: str) -> list[dict]:
        future = self._started.pop(name, None) or self._pool.submit(self._run, name)
        return future.result()

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)

    def _run(self, name: str) -> list[dict]:
        if self._rollups_updated is not None and reads_rollups(name):  # finding out costs 10 ms a report
            self._await_rollups()
        return sql.report_rows(self.shared.here(), name)

    def _await_rollups(self) -> None:
        """Wait for the roll-ups' update, then point the session's roll-up views at the version it
        published (the session opened on the one before)."""
        with self._waiting:
            if self._rollups_updated is None:
                return
            self._rollups_updated.result()
            self.shared.set_variables(**self._store.rollup_variables())
            self._rollups_updated = None


@cache
def reads_rollups(name: str) -> bool:
    """Whether report query `name` reads a roll-up (its parse tree names one)."""
    return bool(sql.tables_read([sql.query_text(f"report/{name}")], ROLLUP_TABLES))


def bar_px(bars: int, width: int = PAGE_PX - AXIS_PX, most: int = MAX_BAR_PX) -> int:
    """Pixels per bar for `bars` bars to fill `width`, within bounds."""
    return max(MIN_BAR_PX, min(most, width // max(bars, 1)))


def render(queries: ReportQueries, run_id: str, verdicts: list[Verdict]) -> str:
    """The report's HTML, from a roll-up session over the run (see report_run)."""
    queries.set_variables(run_id=run_id, max_stretches=MAX_STRETCHES, max_points=MAX_POINTS, max_steps=MAX_STEPS)
    queries.start(sorted({path.stem for path in REPORT_QUERIES.glob("*.sql")} - ASKED_LATER))
    headline = queries.rows("headline")
    if not headline:
        raise LookupError(f"run {run_id!r} has no published tables")
    run = headline[0]
    page = Page(f"wirespeed report: {run_id}", _subtitle(run))
    failed = [v.name for v in verdicts if not v.outcome.passed]
    doubts = paragraph(f"Checks failed: {', '.join(failed)} (see Checks below).") if failed else ""
    problems, dumps = queries.rows("fr_mismatches"), queries.rows("fr_dumps")
    if problems:
        page.add("Did the job hang, or its ranks disagree?", _flight_recorder(problems, dumps))
    page.add("Is the network the bottleneck?", _verdict(queries.rows("verdict")) + doubts)
    page.add("Is communication exposed?", _summary(run, verdicts))
    page.add("Has it regressed?", _regressions(run, queries.rows("regressions")))

    states = queries.rows("step_states")
    if states:
        steps = run["steps"]
        shown = paragraph(f"The first {MAX_STEPS} of the run's {steps} steps are drawn.") if steps > MAX_STEPS else ""
        ranks, shown_steps = len({row["rank"] for row in states}), len({row["step"] for row in states})
        if ranks <= MAX_FACETED_RANKS:
            columns = max(1, min(4, ranks, PAGE_PX // (MIN_BAR_PX * shown_steps + AXIS_PX)))
            bars = bar_px(shown_steps, PAGE_PX // columns - AXIS_PX)
            chart = page.chart("step_breakdown", {"step_states": states}, bar_px=bars, columns=columns)
        else:
            chart = page.chart("rank_breakdown", {"step_states": states})
        page.add("Step breakdown", chart + shown)
        page.add("Timeline of a step", _timeline(queries, page))
    else:
        page.add(
            "Step breakdown",
            paragraph(
                "The traces have no steps (ProfilerStep annotations, or instances of the annotation named by "
                "--step-annotation or wirespeed.toml [steps]), so there are no per-step figures; "
                "the per-rank figures below cover each whole trace."
            ),
        )
    page.add("Which parallel dimension waits?", _dimensions(queries, page))
    page.add("What does each step wait for, chain by chain?", _critical_path(queries, page))
    page.add(
        "Per rank",
        table(
            queries.rows("rank_summary"),
            {"median_step_ms": ".3f", "exposed_comm_share": ".1%", "overlap_pct": ".1f", "idle_share": ".1%"},
            "No rank has a profiler trace.",
        ),
    )
    page.add(
        "Collectives",
        table(queries.rows("collective_mix"), {"total_mb": ".3f", "median_mb": ".3f", "median_us": ".1f"},
              "No collective was found in the traces."),
    )
    page.add("Bandwidth", _bandwidth(queries, page))
    page.add("What if the network ran at full line rate?", _whatif(queries, page))
    if not problems:
        page.add("Flight Recorder: did every rank make the same calls?", _flight_recorder(problems, dumps))
    page.add("NCCL: communicators, links, calls and errors", _nccl(queries, page))
    page.add("Checks", _checks(verdicts))
    page.add("What ingestion skipped or doubted", table(queries.rows("issues"), empty="Nothing: every file was read whole."))
    page.add("How to read this", _reading_notes())
    return page.render()


def _regressions(run: dict, rows: list[dict]) -> str:
    """The run against its job's baseline (sql/regressions.sql): what regressed, then every measure."""
    if not rows:
        if not run["job"]:
            return paragraph("The run has no job tag, so it has no baseline to be compared with (wirespeed collect --job NAME).")
        return paragraph(f"No baseline: no earlier run of job {run['job']} with {run['world_size']} ranks is in the warehouse.")
    regressed = [row["summary"] for row in rows if row["regressed"]]
    lead = (
        "Regressed against the job's baseline: " + "; ".join(regressed) + "."
        if regressed else f"No regression against the {rows[0]['baseline_runs']} baseline run(s) of the job."
    )
    shown = [{k: v for k, v in row.items() if k != "summary"} for row in rows]
    formats = {"median": ".4g", "baseline_median": ".4g", "change": "+.3f", "p_value": ".3g"}
    note = (
        "Each measure is compared as a distribution (steps, or collectives of a kind) with a one-sided Mann-Whitney "
        "test; it regressed when the test says worse and the change is large enough to matter (docs/compare.md)."
    )
    return f"<p class='headline'>{text(lead)}</p>" + table(shown, formats) + paragraph(note)


def _subtitle(run: dict) -> str:
    """The run in one line: job, ranks, hosts, backend, link."""
    link = f"{run['link_gbps']:g} Gbit/s link" if run["link_gbps"] else "line rate unknown"
    return " · ".join(
        str(part) for part in (
            f"job {run['job']}" if run["job"] else None,
            f"{run['world_size']} ranks" if run["world_size"] else None,
            f"{run['hosts']} host{'s' if run['hosts'] != 1 else ''}" if run["hosts"] else None,
            run["backend"],
            link,
            run["device_model"],
        ) if part
    )


def _timeline(queries: ReportQueries, page: Page) -> str:
    """A Gantt of one step on every rank, opening on the typical step, with a selector for the others."""
    steps = queries.rows("timeline_steps")
    per_step = MAX_STRETCHES // len(steps)
    queries.set_variables(timeline_steps=[row["step"] for row in steps], max_stretches_per_step=per_step)
    stretches = queries.rows("step_stretches")
    path = queries.rows("critical_path_points")
    labels = [
        f"{row['step']}{' (typical)' if row['typical'] else ''}: {row['mean_step_ms']:.1f} ms, "
        + ("exposure unknown" if row["exposed_comm_share"] is None else f"{row['exposed_comm_share']:.0%} exposed")
        for row in steps
    ]
    picker = {"step": {"value": steps[0]["step"], "options": [row["step"] for row in steps], "labels": labels}}
    note = (
        f"It opens on step {steps[0]['step']}, whose length is the median of the run's steps. Pick another step in the "
        "list under the chart; zoom with the mouse wheel, drag to pan, double-click to zoom back out."
    )
    if len(steps) == MAX_TIMELINE_STEPS:
        note += f" The list offers {MAX_TIMELINE_STEPS} steps: the typical one, then the first in order."
    if max(Counter(row["step"] for row in stretches).values(), default=0) >= per_step:
        note += f" Of a step with more than {per_step} busy stretches, only the longest {per_step} are drawn."
    with_path = {row["step"] for row in path}
    if with_path:
        note += (" The black line is the step's critical path, the longest chain of dependencies the traces record, "
                 "across ranks where a collective ties them (see step_critical_path).")
        if len(with_path) < len(steps):
            note += " A run this large has the critical paths of some steps only; the others have no line."
        if max(Counter(row["step"] for row in path).values()) >= per_step:
            note += (f" A path of more than {per_step} points is drawn through those where it changes rank and its "
                     f"{per_step} longest dependencies.")
    return paragraph(note) + page.chart("step_timeline", {"step_stretches": stretches, "critical_path_points": path},
                                        params=picker)


def _bandwidth(queries: ReportQueries, page: Page) -> str:
    """Bus bandwidth against size, throughput over time, waiting against transfer, stragglers."""
    parts = []
    points = queries.rows("bandwidth_by_size")
    if points:
        columns = len({row["size_from"] for row in points}) * len({row["op"] for row in points})
        parts.append(page.chart("bandwidth_by_size", {"bandwidth_by_size": points}, bar_px=bar_px(columns, most=80)))
    else:
        parts.append(paragraph("No collective has both a known size and a duration, so no bandwidth can be computed."))
    series = queries.rows("throughput_over_time")
    if series:
        parts.append(page.chart("throughput", {"throughput_over_time": series}))
    percent = {"mean_utilization": ".1%", "peak_utilization": ".1%", "comm_mean_utilization": ".1%"}
    rates = {"mean_gbps": ".3f", "p95_gbps": ".3f", "peak_gbps": ".3f"}
    parts.append(table(queries.rows("network"), percent | rates,
                       "No network throughput to show: the run has no NIC counter samples (`wirespeed collect` "
                       "takes them)."))
    waits = queries.rows("wait_vs_transfer")
    if waits:
        parts.append(page.chart("wait_vs_transfer", {"wait_vs_transfer": waits}, bar_px=bar_px(len({row["step"] for row in waits}))))
    stragglers = queries.rows("stragglers")
    if any(row["straggler_rank"] is not None for row in stragglers):
        parts.append(table(stragglers, {"max_skew_ms": ".3f", "exposed_comm_ms": ".3f", "wait_share": ".1%"}))
    return "".join(parts)


def _dimensions(queries: ReportQueries, page: Page) -> str:
    """Exposed communication per parallel dimension, per step and per process group."""
    groups = queries.rows("comm_groups")
    if not groups:
        return paragraph("No collective was found, so no process group's communication can be weighed.")
    steps = queries.rows("dimension_steps")
    parts = (
        [page.chart("dimension_steps", {"dimension_steps": steps}, bar_px=bar_px(len({row["step"] for row in steps})))]
        if steps else [paragraph("No communication was exposed.")]
    )
    parts.append(table(groups, {"total_mb": ".3f", "exposed_ms_per_rank": ".3f", "exposed_share": ".1%", "busbw_gbps": ".3f"}))
    parts.append(paragraph(
        "Exposed communication at each instant is shared equally among the process groups communicating then "
        "(step_comm_groups). A group's dimension comes from wirespeed.toml [dimensions], else from its name "
        "(DeviceMesh, torchtitan, Megatron), else from what it does (docs/metrics.md)."
    ))
    return "".join(parts)


def _critical_path(queries: ReportQueries, page: Page) -> str:
    """Each step's critical path, by part: what the longest chain of dependencies through it held."""
    steps = queries.rows("critical_path_steps")
    if not steps:
        return paragraph("No step has a critical path: the traces have no steps, or no events on them.")
    chart = page.chart("critical_path_steps", {"critical_path_steps": steps}, bar_px=bar_px(len({row["step"] for row in steps})))
    return chart + paragraph(
        "The critical path of a step on a rank is the longest chain of dependencies its traces record: operators "
        "in order on each thread, launches and kernels on their streams, the waits the trace's cuda_sync events "
        "show, and, across ranks, each collective's wait for its last rank (step_critical_path, docs/metrics.md). "
        "A large run has the path of one step per rank."
    )


# What each parallel dimension is, for readers who know it by another name.
DIMENSION_NAMES = {
    "dp": "data parallel", "fsdp": "fully sharded data parallel", "tp": "tensor parallel", "pp": "pipeline parallel",
    "ep": "expert parallel", "cp": "context parallel", "other": "no parallel dimension recognised",
}

# The verdict's colour: green when the network is not what limits the run, grey when nothing
# can be judged, else the warm colour of exposed communication.
_VERDICT_CLASS = {"not communication-bound": "good", "no traces": "unknown", "no communication found": "unknown"}


def _verdict(rows: list[dict]) -> str:
    """The answer in five seconds: the class, its explanation, and the key figures as tiles."""
    if not rows:
        return paragraph("No verdict: the run has no published tables.")
    verdict = rows[0]

    def share(value, digits=1):
        return "unknown" if value is None else f"{value:.{digits}%}"

    def factor(value):
        return "unknown" if value is None else f"{value:.2f}"

    link = "the line rate" if verdict["link_gbps"] is None else f"{verdict['link_gbps']:g} Gbit/s"
    scope = {"inter": "over the network", "intra": "within a host"}.get(verdict["dominant_scope"], "over an unknown link")
    if verdict["measured_sf"] is not None:
        now = (factor(verdict["measured_sf"]), f"measured against the job's baseline ({verdict['baseline_kind']})")
    else:
        now = (factor(verdict["estimated_sf"]), "estimated: the median step without its exposed communication, over the median step (no baseline run)")
    tiles = [
        ("exposed communication", share(verdict["exposed_comm_share"]),
         "of step time" + ("" if verdict["wait_share"] is None else f"; {verdict['wait_share']:.0%} of it waiting for other ranks")),
        ("steps wait most for", verdict["dominant_dimension"] or "nothing",
         "no communication was exposed" if verdict["dominant_dimension"] is None
         else f"{DIMENSION_NAMES.get(verdict['dominant_dimension'], verdict['dominant_dimension'])}: "
         f"{verdict['dominant_dimension_share']:.0%} of the exposed time, {scope}"),
        ("utilisation of the line rate", share(verdict["utilization"], 0),
         "no bus bandwidth measured" if verdict["achieved_busbw_gbps"] is None
         else f"{verdict['achieved_busbw_gbps']:.3g} Gbit/s of {link}, bus bandwidth"),
        ("scaling factor now", *now),
        ("at full line rate", factor(verdict["full_rate_sf"]), f"what-if at {link}, uncompressed"),
    ]
    tiles_html = "".join(
        f"<div class='tile'><div class='label'>{text(label)}</div><div class='value'>{text(value)}</div>"
        f"<div class='sub'>{text(sub)}</div></div>"
        for label, value, sub in tiles
    )

    facts = [
        ("exposed communication", share(verdict["exposed_comm_share"])),
        ("of which waiting for other ranks", share(verdict["wait_share"], 0)),
        ("achieved bus bandwidth", "unknown" if verdict["achieved_busbw_gbps"] is None else f"{verdict['achieved_busbw_gbps']:.3f} Gbit/s"),
        ("utilisation of the line rate", share(verdict["utilization"])),
        ("scaling factor at full line rate (what-if)", "unknown" if verdict["full_rate_sf"] is None else f"{verdict['full_rate_sf']:.3f}"),
        ("measured scaling factor", "no baseline run" if verdict["measured_sf"] is None else f"{verdict['measured_sf']:.3f} (baseline: {verdict['baseline_kind']})"),
        ("estimated scaling factor (median step less exposed communication / median step)", "unknown" if verdict["estimated_sf"] is None else f"{verdict['estimated_sf']:.3f}"),
    ]
    rows_html = "".join(f"<tr><th>{text(k)}</th><td>{text(v)}</td></tr>" for k, v in facts)
    kind = _VERDICT_CLASS.get(verdict["bottleneck"], "bad")
    return (
        f"<p class='verdict {kind}'>{text(verdict['bottleneck'].capitalize())}</p>"
        f"<p class='headline'>{text(verdict['explanation'])}</p>"
        f"<div class='tiles'>{tiles_html}</div>"
        f"<details><summary>Every figure of the verdict</summary><table>{rows_html}</table></details>"
    )


def _whatif(queries: ReportQueries, page: Page) -> str:
    """The what-if grid as a heatmap, what it takes to reach the targets, and scaling across the job."""
    grid = queries.rows("whatif_grid")
    if not grid:
        return paragraph("No what-if: no collective of the traces has both a size and a duration to replay (the verdict above says why).")
    parts = [page.chart("whatif", {"whatif_grid": grid})]
    parts.append(table(queries.rows("whatif_needs"), {"target": ".2f"},
                       "The what-if has no targets to search for this run."))
    scaling = queries.rows("job_scaling")
    if scaling:
        parts.append(page.chart("job_scaling", {"job_scaling": scaling}))
    if grid[0]["model"] == "replay":
        rate = (
            "at the share of line rate it achieved in the run" if grid[0]["transfers"] == "achieved"
            else "at the full line rate (the run's own line rate is unknown, so how much of it the run achieved is too)"
        )
        parts.append(paragraph(
            f"The replay re-runs every step with each collective's transfer at the line rate of the cell, {rate}, its "
            "latency kept, and every wait for it moved with its end (docs/whatif.md). It leaves out compute that a link "
            "slows or speeds and the cost of compressing."
        ))
    else:
        parts.append(paragraph(
            "The paper's model replays the run's gradient buckets, in the order and at the times they became ready "
            "during backward, through one all-reduce channel at full line rate (docs/whatif.md). It leaves out "
            "latency, the intra-node stage, contention, stragglers and the cost of compressing."
        ))
    return "".join(parts)


def _nccl(queries: ReportQueries, page: Page) -> str:
    """Topology, transports, the mix of calls and the problems NCCL logged; works with logs alone."""
    topology = queries.rows("nccl_topology")
    mix = queries.rows("nccl_call_mix")
    problems = queries.rows("nccl_problems")
    tests = queries.rows("nccl_tests")
    if not (topology or mix or problems or tests):
        return paragraph(
            "The run has no NCCL logs. `wirespeed collect` captures them (NCCL_DEBUG=INFO with the INIT and COLL "
            "subsystems, one file per process); logs from elsewhere can be put in the run folder or ingested alone."
        )
    parts = [table(topology, {"init_seconds": ".2f"}, "The logs hold no communicator's set-up (the INIT subsystem was off).")]
    links = queries.rows("nccl_links")
    if links:
        parts.append(page.chart("nccl_links", {"nccl_links": links}))
    if mix:
        parts.append(page.chart("nccl_call_mix", {"nccl_call_mix": mix}))
    crosscheck = queries.rows("nccl_crosscheck")
    if crosscheck:
        parts.append(paragraph("Traces against logs (docs/nccl.md): each trace collective compared with the logged call at its place."))
        parts.append(table(crosscheck))
    if tests:
        parts.append(page.chart("nccl_tests", {"nccl_tests": tests}))
    parts.append(paragraph("Warnings and errors, in time order:"))
    parts.append(table(problems, empty="NCCL logged no warning or error."))
    return "".join(parts)


def _flight_recorder(problems: list[dict], dumps: list[dict]) -> str:
    """The ranks' Flight Recorders side by side: the first problem in words, every problem, each dump."""
    if not dumps:
        return paragraph(
            "The run has no Flight Recorder dumps. `wirespeed collect` turns the recorder on and `Capture` writes each "
            "rank's into fr/ when the job ends or is signalled; torch's own JSON dumps can be put in the run folder "
            "(docs/flight-recorder.md)."
        )
    entries = sum(row["entries"] for row in dumps)
    ranks = len({row["rank"] for row in dumps})
    if problems:
        label = "Hang" if problems[0]["problem"] in ("rank missing", "stuck") else "Mismatch"
        lead = f"<p class='verdict bad'>{text(label)}</p><p class='headline'>{text(problems[0]['verdict'])}.</p>"
        listed = table(problems) + paragraph(
            "Each row is a collective of a process group, by its sequence number, on which the ranks' recorders "
            "disagree; after a group's first problem the rest often follow from it (fr_mismatches)."
        )
    else:
        lead = paragraph(
            f"The recorders of {ranks} ranks hold {entries} collectives, and they agree: every rank entered every "
            "collective of its groups, with the same op, sizes and element types."
        )
        listed = ""
    return lead + listed + paragraph("Each rank's dump, and where its main thread was when it was taken:") + table(
        dumps, empty="No dump."
    )


def _summary(run: dict, verdicts: list[Verdict]) -> str:
    no_comm = any(v.name == "communication_found" and not v.outcome.passed for v in verdicts)
    share = run["exposed_comm_share"]
    if not run["trace_files"]:
        lead = "This run has no profiler traces, only logs: its communicators, links and calls are below; exposure needs traces."
    elif no_comm and not run["collectives"]:
        lead = (
            "No communication was found in this run's traces, so no exposure can be measured. "
            "If the run does communicate (through custom kernels, say), add their names to "
            "[communication] patterns in wirespeed.toml and re-run the analysis."
        )
    elif share is None:
        lead = "The traces have no measurable activity."
    else:
        basis = f"over {run['steps']} steps" if run["basis"] == "steps" else "over the whole traces"
        lead = f"Exposed communication takes {share:.1%} of step time ({basis}, all ranks together)."
        if run["overlap_pct"] is not None:
            lead += f" {run['overlap_pct']:.1f}% of communication time was hidden under compute."
    facts = [
        ("run", run["run_id"]),
        ("source", f"{run['source_kind']}: {run['source_path']}"),
        ("job", run["job"]),
        ("world size", f"{run['world_size']} ({run['world_size_source']})"),
        ("ranks with a trace", run["ranks_found"]),
        ("backend", run["backend"]),
        ("hosts", run["hosts"]),
        ("link line rate", f"{run['link_gbps']:g} Gbit/s ({run['link_source']})" if run["link_gbps"] else "unknown"),
        ("device", run["device_model"]),
        ("PyTorch / NCCL / CUDA", " / ".join(str(v or "?") for v in (run["torch_version"], run["nccl_version"], run["cuda_version"]))),
        ("median step", f"{run['median_step_ns'] / 1e6:.3f} ms" if run["median_step_ns"] else "no steps"),
        ("ingested", dt.datetime.fromtimestamp(run["ingested_at_ns"] / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")),
    ]
    rows = "".join(f"<tr><th>{text(k)}</th><td>{text(v)}</td></tr>" for k, v in facts)
    return f"<p class='headline'>{text(lead)}</p><table>{rows}</table>"


def _checks(verdicts: list[Verdict]) -> str:
    rows = "".join(
        f"<tr><td>{text(v.name)}</td><td class='{'pass' if v.outcome.passed else 'fail'}'>"
        f"{'passed' if v.outcome.passed else 'failed'}</td><td>{text(v.outcome.summary)}</td></tr>"
        for v in verdicts
    )
    return f"<table><thead><tr><th>check</th><th>result</th><th>what it found</th></tr></thead><tbody>{rows}</tbody></table>"


def _reading_notes() -> str:
    notes = [
        "Each step is measured on the device timeline (kernels, copies, fills) when the trace has one, else on the CPU "
        "timeline (gloo runs). Compute, communication and other are unions of intervals; communication that runs while "
        "compute runs is overlapped, communication alone is exposed and makes the step longer.",
        "step = compute + exposed communication + other + idle, exactly, on every rank and step.",
        "Bandwidths are in Gbit/s like line rates (nccl-tests prints GB/s: divide by 8). A collective's transfer is "
        "its shortest duration across ranks; the rest of each rank's duration was waiting for the last rank to arrive.",
        "Tables behind this page: runs, step_breakdown, step_comm_groups, step_timeline, steps, rank_breakdown, collectives, "
        "collective_bw, collective_sync, step_sync, net_utilization, network_summary, whatif, verdict, regressions, nccl_comms, "
        "nccl_connections, nccl_calls, nccl_messages, nccl_tests_results, nccl_crosscheck, fr_dumps, fr_entries, "
        "fr_process_groups, fr_mismatches, parse_issues. "
        "Query them with `wirespeed sql`.",
    ]
    return "".join(paragraph(n) for n in notes)


def write(html: str, target: Path) -> None:
    """Write the report atomically: readers see the old file or the new one, never half of one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    temporary.write_text(html, encoding="utf-8")
    os.replace(temporary, target)


def report_run(
    store: Warehouse, settings: Settings, run_id: str, target: Path | None = None,
    verdicts: list[Verdict] | None = None, stored_rollups: bool | Future = False,
) -> Path:
    """Render the published version of a run and write it (by default into the warehouse).

    The run's check `verdicts` are those its version keeps unless given (judged here for a version
    that keeps none). The roll-ups (its verdict, its job's scaling) are recomputed for it and its
    job mates, unless `stored_rollups` says the stored ones were just updated for it (True) or
    are being updated for it (the update's future, which the queries reading them wait for), or
    their stamp says they are current.
    """
    version = store.published(run_id)
    if version is None:
        raise LookupError(f"run {run_id!r} is not in the warehouse {store.root}")
    if verdicts is None:
        verdicts = checks.kept(version)
    if verdicts is None:
        con = open_version(version, settings, run_id, TABLES)
        try:
            verdicts = [checks.judge(check, con) for check in checks.PARSE_CHECKS + checks.ANALYSIS_CHECKS]
        finally:
            con.close()
    mates = [run_id] if stored_rollups else rollups.job_mates(store, settings, [run_id])
    live = not stored_rollups and not rollups.current(store, settings, mates)
    texts = [sql.query_text(f"report/{path.stem}") for path in sorted(REPORT_QUERIES.glob("*.sql"))]
    shared = sql.SharedSession(settings.duckdb_config())
    queries = ReportQueries(shared, settings.threads, stored_rollups if isinstance(stored_rollups, Future) else None, store)
    try:
        con = rollups.session(store, settings, mates if live else [run_id], texts, shared)
        if live:
            rollups.recompute(con, temporary=False)
        html = render(queries, run_id, verdicts)
    finally:
        queries.close()
        shared.close()
    target = target or store.report_path(run_id)
    write(html, target)
    return target
