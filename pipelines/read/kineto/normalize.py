"""Turn one Kineto trace file into a Parquet part of `trace_events`.

The fast path cuts the file into chunk files (`splitter`) and lets DuckDB parse and normalise them
in one `COPY`. When DuckDB rejects a chunk (another layout, a value of the wrong type, bytes that
are not UTF-8) the file goes through the exact path (`exact`) instead, which keeps every event it
can and says what it skipped. Either way the chunk files are temporary and the raw trace is only
ever read.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from pipelines.read.issues import ParseIssue
from pipelines.read.kineto.exact import exact_trace
from pipelines.warehouse import sql
from pipelines.read.kineto.fields import (
    ARG_KEYS, EXACT_TIME_TYPE, FAST_TIME_LIMIT_NS, FAST_TIME_TYPE, MAX_PLAUSIBLE_DUR_NS, event_json_columns,
)
from pipelines.read.kineto.splitter import CannotCut, split_trace

_RANK_IN_NAME = re.compile(r"rank[^0-9a-z]{0,2}(\d+)", re.IGNORECASE)
# Before 2001 in nanoseconds: a trace whose times land here was written relative to a base
# timestamp that the file no longer has (its end, where Kineto writes the base, was cut off).
_PLAUSIBLE_EPOCH_NS = 978_307_200 * 10**9


@dataclass
class ReadTrace:
    """A trace file read far enough to know its metadata, with its events in chunk files."""

    path: Path
    meta: dict
    chunk_paths: list[Path]
    json_format: str  # "array" for cut chunks, "newline_delimited" for exact-path output
    parser: str  # "fast" or "exact"
    layout: str
    input_bytes: int
    truncated: bool
    issues: list[ParseIssue] = field(default_factory=list)


@dataclass
class EventStats:
    """What the written events say about the trace, for `ranks` and the quality checks."""

    events: int
    first_ns: int | None
    last_ns: int | None
    device_events: int
    null_times: int
    negative_durations: int
    overlong_durations: int
    pid: int | None  # the process that wrote the trace: the pid of its CPU events


def rank_from_trace(meta: dict, path: Path) -> tuple[int | None, str]:
    """The rank a trace belongs to: from `distributedInfo`, else from the file name."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"], "trace"
    match = _RANK_IN_NAME.search(path.name)
    if match:
        return int(match.group(1)), "file name"
    return None, "unknown"


def read_trace(path: Path, work_dir: Path) -> ReadTrace:
    """Cut `path` into chunks for DuckDB, or decode it exactly when it cannot be cut."""
    try:
        cut = split_trace(path, work_dir / "cut")
    except CannotCut:
        return _read_exactly(path, work_dir, [])
    return ReadTrace(path, cut.meta, cut.chunk_paths, "array", "fast", cut.layout, cut.input_bytes, cut.truncated, cut.issues)


def _read_exactly(path: Path, work_dir: Path, earlier: list[ParseIssue]) -> ReadTrace:
    exact = exact_trace(path, work_dir / "exact", frozenset(ARG_KEYS))
    return ReadTrace(
        path, exact.meta, exact.chunk_paths, "newline_delimited", "exact", "any", exact.input_bytes,
        exact.truncated, earlier + exact.issues,
    )


RELATIVE = "relative to baseTimeNanoseconds"


def time_base(meta: dict) -> tuple[int, str]:
    """Nanoseconds to add to `ts * 1000`, and which timestamp regime the trace uses."""
    base = meta.get("baseTimeNanoseconds")
    if isinstance(base, int):
        return base, RELATIVE
    return 0, "absolute microseconds"


def write_events(
    con: duckdb.DuckDBPyConnection,
    trace: ReadTrace,
    work_dir: Path,
    out_path: Path,
    run_id: str,
    rank: int,
    file_index: int,
) -> ReadTrace:
    """Normalise the trace's chunks into `out_path`; fall back to the exact path if DuckDB balks.

    Times relative to the trace's base are read as doubles, and read again as decimals in the
    rare trace where one is too far from the base for a double to hold its nanoseconds.
    """
    base_ns, regime = time_base(trace.meta)
    sql.set_variables(con, run_id=run_id, rank=rank, file_index=file_index, base_ns=base_ns)
    try:
        if regime == RELATIVE and _copy(con, trace, out_path, FAST_TIME_TYPE) and _held_exactly(con, out_path, base_ns):
            return trace
        _copy(con, trace, out_path, EXACT_TIME_TYPE)
        return trace
    except duckdb.Error as refused:
        if trace.parser == "exact":
            raise
        note = ParseIssue(
            str(trace.path), None, None, "warning",
            f"the fast parser could not read this trace ({_first_line(refused)}); it was read event by event",
        )
        exact = _read_exactly(trace.path, work_dir, [note])
        # The fast pass may have read the metadata fine even when an event is bad; keep it.
        exact.meta = exact.meta or trace.meta
        _copy(con, exact, out_path, EXACT_TIME_TYPE)
        return exact


def _copy(con: duckdb.DuckDBPyConnection, trace: ReadTrace, out_path: Path, time_type: str) -> bool:
    """Write the trace's events to `out_path`, times read as `time_type`; False when it has none."""
    if not trace.chunk_paths:
        sql.write_empty("trace_events", out_path)
        return False
    sql.set_variables(
        con,
        chunk_files=[str(p) for p in trace.chunk_paths],
        json_format=trace.json_format,
        event_columns=event_json_columns(time_type),
        times_as_double=time_type == FAST_TIME_TYPE,
    )
    sql.write_parquet(con, f"({sql.table('trace_events').select()})", out_path)
    return True


def _held_exactly(con: duckdb.DuckDBPyConnection, part: Path, base_ns: int) -> bool:
    """Whether every time in a part read with doubles was near enough its base to be exact."""
    (far,) = con.execute(
        "SELECT count(*) FROM read_parquet($part) WHERE abs(ts_ns - $base) >= $limit OR abs(dur_ns) >= $limit",
        {"part": str(part), "base": base_ns, "limit": FAST_TIME_LIMIT_NS},
    ).fetchall()[0]
    return far == 0


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0][:300]


def event_stats(con: duckdb.DuckDBPyConnection, part: Path) -> EventStats:
    """Summarise a written part: counts and time range, and the values no analysis can use."""
    row = con.execute(
        """
        SELECT
          count(*),
          min(ts_ns),
          max(ts_ns + coalesce(dur_ns, 0)),
          count(*) FILTER (WHERE cat IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'Kernel', 'Memcpy', 'Memset')),
          count(*) FILTER (WHERE ts_ns IS NULL),
          count(*) FILTER (WHERE dur_ns < 0),
          count(*) FILTER (WHERE dur_ns > $max_dur),
          mode(TRY_CAST(pid AS BIGINT)) FILTER (WHERE cat IN ('cpu_op', 'user_annotation', 'cuda_runtime'))
        FROM read_parquet($part)
        """,
        {"part": str(part), "max_dur": MAX_PLAUSIBLE_DUR_NS},
    ).fetchall()[0]
    return EventStats(*row)


def quality_issues(trace: ReadTrace, stats: EventStats, base_ns: int) -> list[ParseIssue]:
    """Turn suspicious counts into issues; the analysis SQL leaves these events out."""
    name = str(trace.path)
    issues = []
    if stats.events == 0:
        issues.append(ParseIssue(name, None, None, "warning", "the trace has no events"))
    if stats.null_times:
        issues.append(ParseIssue(name, None, None, "error", f"{stats.null_times} events have no usable timestamp; analyses skip them"))
    if stats.negative_durations:
        issues.append(ParseIssue(name, None, None, "error", f"{stats.negative_durations} events have a negative duration; analyses skip them"))
    if stats.overlong_durations:
        issues.append(
            ParseIssue(name, None, None, "error", f"{stats.overlong_durations} events last over 7 days (counter overflow); analyses skip them")
        )
    if base_ns == 0 and stats.first_ns is not None and stats.first_ns < _PLAUSIBLE_EPOCH_NS:
        issues.append(
            ParseIssue(
                name, None, None, "warning",
                "timestamps are relative but the trace has no baseTimeNanoseconds (was its end cut off?); "
                "its times are not on the absolute clock",
            )
        )
    return issues


def cleanup(work_dir: Path) -> None:
    shutil.rmtree(work_dir, ignore_errors=True)
