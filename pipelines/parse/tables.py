"""The parse stage of a run: raw inputs in, the run's parse tables out (into a staging version).

Per trace file: read it (fast cut or exact decode), normalise its events into a Parquet part of
`trace_events`, then record what was learnt about it in `ranks`. A file that cannot be read at all
becomes a row of `parse_issues` and the run goes on without it. Counter samples become
`net_samples` and `cpu_samples`, Flight Recorder dumps `fr_dumps`, `fr_entries` and
`fr_process_groups`. The tables of the run as a whole (`runs`, `process_groups`, `parse_issues`)
are written last.

The trace files are parsed in shards (`start_parse`, `parse_shard`, `finish_parse`), which
processes on several machines sharing the warehouse's folder can parse at once; each shard leaves
a record of its files in the staging version for the finish to read. One process parsing them
all (`parse_run`) is the same three steps, with one shard.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

from pipelines.read import fr_dumps
from pipelines.read.issues import ParseIssue
from pipelines.read.kineto import normalize
from pipelines.read.kineto.fields import MAX_PLAUSIBLE_DUR_NS
from pipelines.read.kineto.splitter import CannotCut, NotATrace
from pipelines.read.nccl import calls as nccl_calls
from pipelines.read.nccl.logfile import scan_log
from pipelines.read.sources import RunSource
from pipelines.settings import Settings
from pipelines.warehouse import sql
from pipelines.warehouse.store import Warehouse

Progress = Callable[[int], None]


@dataclass
class ParsedFile:
    row: dict
    part: Path


@dataclass
class FileResult:
    """One trace file's outcome: its `ranks` row and part when it was ingested, and its issues."""

    path: Path
    parsed: ParsedFile | None
    meta: dict
    issues: list[ParseIssue]


@dataclass
class ParseSummary:
    run_id: str
    files: int
    ranks: int
    events: int
    issues: list[ParseIssue]
    seconds: float


def parse_run(
    source: RunSource,
    version: Path,
    warehouse: Warehouse,
    settings: Settings,
    progress: Progress | None = None,
) -> ParseSummary:
    """Write `runs`, `ranks`, `process_groups`, `trace_events` and `parse_issues` for one run: its
    trace files as one shard, in this process, then the rest."""
    shards = start_parse(source, version, shard_bytes=None)
    parse_shard(source, version, settings, 0, shards[0], progress)
    return finish_parse(source, version, warehouse, settings, progress)


SHARDS_DIR = "_shards"  # in a staging version: the shard plan, and a record of each shard parsed


def start_parse(source: RunSource, version: Path, shard_bytes: int | None) -> list[list[int]]:
    """Plan the run's parse: its trace files (by index) in shards of about `shard_bytes` of raw
    input each, in file order (a larger file a shard alone; None: one shard). Empties the
    version's trace_events and shard records, and writes the plan beside them."""
    shards: list[list[int]] = [[]]
    size = 0
    for index, path in enumerate(source.trace_files):
        nbytes = path.stat().st_size if path.exists() else 0
        if shards[-1] and shard_bytes is not None and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(index)
        size += nbytes
    for name in ("trace_events", SHARDS_DIR):
        shutil.rmtree(version / name, ignore_errors=True)
        (version / name).mkdir(parents=True)
    plan = {"files": [str(path) for path in source.trace_files], "shards": shards}
    _write_json(version / SHARDS_DIR / "plan.json", plan)
    return shards


def parse_shard(
    source: RunSource, version: Path, settings: Settings, shard: int, files: list[int], progress: Progress | None = None,
) -> dict:
    """Parse trace files `files` (indices of the plan) into parts of the version's trace_events,
    and record what was learnt of each (its `ranks` row, metadata, issues) for `finish_parse`.
    Any process that sees the version's folder can run a shard. Returns the shard's record,
    without its files' results."""
    started = time.time()
    plan = json.loads((version / SHARDS_DIR / "plan.json").read_text())
    now = [str(path) for path in source.trace_files]
    if any(index >= len(now) or now[index] != plan["files"][index] for index in files):
        raise ValueError(f"{source.path}: the run's trace files changed after its parse was planned")
    con = sql.session(settings.duckdb_config())
    work_root = version / "_work" / f"shard-{shard}"
    results = []
    try:
        for result in _parse_files(con, source, files, version / "trace_events", work_root, settings.threads):
            results.append(result)
            if progress:
                progress(result.path.stat().st_size)
    finally:
        con.close()
        normalize.cleanup(work_root)
    record = {"shard": shard, "files": files, "host": socket.gethostname(), "pid": os.getpid(),
              "started": started, "seconds": time.time() - started}
    _write_json(version / SHARDS_DIR / f"shard-{shard:05d}.json", {**record, "results": [_as_json(r) for r in results]})
    return record


def finish_parse(
    source: RunSource, version: Path, warehouse: Warehouse, settings: Settings, progress: Progress | None = None,
) -> ParseSummary:
    """Write the run's other parse tables once every shard of its plan is parsed: `ranks` and
    `process_groups` from the shards' records, the counters, logs and Flight Recorder dumps, then
    `runs` and `parse_issues`."""
    plan = json.loads((version / SHARDS_DIR / "plan.json").read_text())
    records = [json.loads(path.read_text()) for path in sorted((version / SHARDS_DIR).glob("shard-*.json"))]
    results = {index: _from_json(result) for record in records for index, result in zip(record["files"], record["results"])}
    unparsed = sorted(set(index for shard in plan["shards"] for index in shard) - set(results))
    if unparsed:
        raise ValueError(f"{version}: trace files {', '.join(plan['files'][i] for i in unparsed)} were planned but no shard parsed them")
    started = min((record["started"] for record in records), default=time.time())
    issues = list(source.issues)
    parsed: list[ParsedFile] = []
    metas: dict[int, dict] = {}
    for index in sorted(results):
        result = results[index]
        issues.extend(result.issues)
        if result.parsed is not None:
            parsed.append(result.parsed)
            metas[index] = result.meta
    con = sql.session(settings.duckdb_config())
    try:
        events_dir = version / "trace_events"
        if not parsed:
            # No trace could be read (or the run has logs only): the table still needs its schema.
            sql.write_empty("trace_events", events_dir / "part-empty.parquet")
        for table, files in (("net_samples", source.net_sample_files), ("cpu_samples", source.cpu_sample_files)):
            _write_samples(con, table, files, warehouse.table_dir(version, table), source.run_id, issues)
        _write_logs(con, source, version, warehouse, issues, progress)
        dumps = _write_flight_recorder(con, source, version, warehouse, issues, progress)
        kept = _drop_duplicate_ranks(parsed, issues)
        rank_rows = [p.row for p in kept]
        if settings.step_annotation:
            issues.extend(_traces_without_steps(con, events_dir, rank_rows, settings.step_annotation))
        _write_rows(con, "ranks", rank_rows, warehouse.table_dir(version, "ranks"))
        group_rows = _process_group_rows(source.run_id, kept, metas)
        _write_rows(con, "process_groups", group_rows, warehouse.table_dir(version, "process_groups"))
        run_row = _run_row(source, rank_rows, metas, issues, dumps)
        _write_rows(con, "runs", [run_row], warehouse.table_dir(version, "runs"))
        issue_rows = [{"run_id": source.run_id, **issue.__dict__} for issue in issues]
        _write_rows(con, "parse_issues", issue_rows, warehouse.table_dir(version, "parse_issues"))
        events = sum(r["events"] for r in rank_rows)
    finally:
        con.close()
    ranks = len({r["rank"] for r in rank_rows})
    return ParseSummary(source.run_id, len(rank_rows), ranks, events, issues, time.time() - started)


def _traces_without_steps(
    con: duckdb.DuckDBPyConnection, events_dir: Path, rank_rows: list[dict], annotation: str
) -> list[ParseIssue]:
    """A warning for each trace of a rank whose traces hold no instance of the step annotation the
    user chose: that rank will have no steps, and a user who misnamed the annotation reads why here."""
    sql.set_variables(
        con, step_annotation=annotation, max_dur_ns=MAX_PLAUSIBLE_DUR_NS, events_glob=str(events_dir / "*.parquet")
    )
    found = con.execute(
        "SELECT DISTINCT rank FROM read_parquet(getvariable('events_glob'))"
        " WHERE is_step_instance(ph, cat, name, ts_ns, dur_ns)"
    ).fetchall()
    with_steps = {rank for (rank,) in found}
    return [
        ParseIssue(row["trace_file"], None, None, "warning",
                   f"no timed event on the CPU has a name holding the step annotation {annotation!r}: "
                   f"rank {row['rank']} has no steps")
        for row in rank_rows if row["rank"] not in with_steps
    ]


def _write_json(path: Path, value) -> None:
    """Write a record whole or not at all: a reader on another host never sees half of it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(value))
    os.replace(partial, path)


def _as_json(result: FileResult) -> dict:
    parsed = None if result.parsed is None else {"row": result.parsed.row, "part": str(result.parsed.part)}
    return {"path": str(result.path), "parsed": parsed, "meta": result.meta, "issues": [i.__dict__ for i in result.issues]}


def _from_json(record: dict) -> FileResult:
    parsed = record["parsed"]
    return FileResult(
        Path(record["path"]),
        None if parsed is None else ParsedFile(parsed["row"], Path(parsed["part"])),
        record["meta"],
        [ParseIssue(**issue) for issue in record["issues"]],
    )


def _parse_files(
    db: duckdb.DuckDBPyConnection, source: RunSource, indices: list[int], events_dir: Path, work_root: Path, workers: int
) -> Iterator[FileResult]:
    """Parse the run's trace files `indices`, `workers` at a time, yielding their results in order.

    Each file is cut and parsed by one worker on its own cursor: DuckDB and the kernel copies
    release the interpreter, so the workers keep every core busy, and no core idles while the
    last chunk of one file is parsed.
    """
    files = source.trace_files

    def parse(index: int) -> FileResult:
        con = db.cursor()
        try:
            return _parse_file(con, source, files[index], index, events_dir, work_root / str(index))
        finally:
            con.close()

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="wirespeed-parse") as pool:
        yield from pool.map(parse, indices)


def _parse_file(
    con: duckdb.DuckDBPyConnection, source: RunSource, path: Path, index: int, events_dir: Path, work: Path
) -> FileResult:
    started = time.perf_counter()
    issues: list[ParseIssue] = []
    try:
        trace = normalize.read_trace(path, work)
        rank, rank_source = normalize.rank_from_trace(trace.meta, path)
        if rank is None:
            rank, rank_source = index, "file order"
            if len(source.trace_files) > 1:
                issues.append(
                    ParseIssue(str(path), None, None, "warning", f"no rank in the trace or its name; rank {rank} taken from file order")
                )
        part = events_dir / f"part-{index:05d}.parquet"
        trace = normalize.write_events(con, trace, work, part, source.run_id, rank, index)
        stats = normalize.event_stats(con, part)
    except (NotATrace, CannotCut) as bad:
        return FileResult(path, None, {}, [*issues, ParseIssue(str(path), None, None, "error", f"not ingested: {bad}")])
    except (OSError, duckdb.Error) as bad:
        problem = ParseIssue(str(path), None, None, "error", f"not ingested: {type(bad).__name__}: {bad}")
        return FileResult(path, None, {}, [*issues, problem])
    finally:
        normalize.cleanup(work)
    base_ns, regime = normalize.time_base(trace.meta)
    issues.extend(trace.issues)
    issues.extend(normalize.quality_issues(trace, stats, base_ns))
    info = trace.meta.get("distributedInfo") if isinstance(trace.meta.get("distributedInfo"), dict) else {}
    devices = trace.meta.get("deviceProperties") or []
    row = {
        "run_id": source.run_id,
        "rank": rank,
        "file_index": index,
        "trace_file": str(path),
        "rank_source": rank_source,
        "host": _host_of(trace.meta, source.manifest, rank),
        "pid": stats.pid,
        "world_size": info.get("world_size"),
        "backend": info.get("backend"),
        "device_name": devices[0].get("name") if devices and isinstance(devices[0], dict) else None,
        "nccl_version": info.get("nccl_version"),
        "time_regime": regime,
        "base_ns": base_ns,
        "parser": trace.parser,
        "layout": trace.layout,
        "input_bytes": trace.input_bytes,
        "events": stats.events,
        "device_events": stats.device_events,
        "first_ns": stats.first_ns,
        "last_ns": stats.last_ns,
        "truncated": trace.truncated,
        "parse_seconds": time.perf_counter() - started,
    }
    return FileResult(path, ParsedFile(row, part), trace.meta, issues)


def _write_samples(
    con: duckdb.DuckDBPyConnection, name: str, files: list[Path], folder: Path, run_id: str, issues: list[ParseIssue]
) -> None:
    """Load counter CSVs; a line that does not parse becomes a parse issue, the rest is kept.

    A file DuckDB cannot read at all (not the sampler's columns) would fail the whole scan, so
    then each is tried alone and the unreadable ones are named instead.
    """
    table = sql.table(name)
    target = folder / "part-0.parquet"
    sql.set_variables(con, run_id=run_id)
    try:
        _load_samples(con, table, files, target)
    except duckdb.Error:
        readable = []
        for path in files:
            sql.set_variables(con, sample_files=[str(path)])
            try:
                con.execute(f"SELECT count(*) FROM ({table.select()})").fetchall()
                readable.append(path)
            except duckdb.Error as bad:
                reason = str(bad).splitlines()[0]
                issues.append(ParseIssue(str(path), None, None, "error", f"not ingested: not counter samples ({reason})"))
        _clear_rejects(con)
        _load_samples(con, table, readable, target)
    if _has_rejects(con):
        rejected = con.execute(
            "SELECT s.file_path, e.line, e.error_message FROM reject_errors AS e JOIN reject_scans AS s USING (scan_id, file_id)"
        ).fetchall()
        for file, line, message in rejected:
            issues.append(ParseIssue(file, line, None, "warning", f"counter sample skipped: {message}"))
        _clear_rejects(con)


def _load_samples(con: duckdb.DuckDBPyConnection, table: sql.TableSql, files: list[Path], target: Path) -> None:
    if not files:
        sql.write_empty(table.name, target)
        return
    sql.set_variables(con, sample_files=[str(f) for f in files])
    sql.write_parquet(con, f"({table.select()})", target)


def _has_rejects(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether DuckDB's tables of rejected CSV lines exist (once a scan stored rejects)."""
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'reject_errors'").fetchall()[0][0] > 0


def _clear_rejects(con: duckdb.DuckDBPyConnection) -> None:
    if _has_rejects(con):
        con.execute("DELETE FROM reject_errors").fetchall()
        con.execute("DELETE FROM reject_scans").fetchall()


NCCL_TABLES = ("nccl_comms", "nccl_connections", "nccl_calls", "nccl_messages", "nccl_tests_results")


def _write_logs(
    con: duckdb.DuckDBPyConnection,
    source: RunSource,
    version: Path,
    warehouse: Warehouse,
    issues: list[ParseIssue],
    progress: Progress | None,
) -> None:
    """Parse every NCCL log of the run into the nccl_* tables; a file that cannot be read is an issue.
    The call lines go from the streaming pass's Parquet (in a work folder of the version, removed
    after) straight to nccl_calls, so memory does not grow with the logs."""
    rows: dict[str, list[dict]] = {name: [] for name in NCCL_TABLES if name != "nccl_calls"}
    offset = source.manifest.get("utc_offset_s") if isinstance(source.manifest.get("utc_offset_s"), int) else 0
    with tempfile.TemporaryDirectory(prefix=".nccl-", dir=version) as work:
        logs = []
        for number, path in enumerate(source.nccl_log_files):
            try:
                parsed = scan_log(path, source.run_id, Path(work) / str(number), offset)
            except OSError as bad:
                issues.append(ParseIssue(str(path), None, None, "error", f"not ingested: {bad}"))
                continue
            logs.append(parsed)
            rows["nccl_comms"] += parsed.comms
            rows["nccl_connections"] += parsed.connections
            rows["nccl_messages"] += parsed.messages
            rows["nccl_tests_results"] += parsed.tests
            issues.extend(parsed.issues)
            if not parsed.parsed:
                issues.append(ParseIssue(str(path), None, None, "info", "read as an NCCL log, but no line in it is one wirespeed reads"))
            if progress:
                progress(path.stat().st_size)
        nccl_calls.write(logs, warehouse.table_dir(version, "nccl_calls"))
    for name, table_rows in rows.items():
        _write_rows(con, name, table_rows, warehouse.table_dir(version, name))


def _write_flight_recorder(
    con: duckdb.DuckDBPyConnection,
    source: RunSource,
    version: Path,
    warehouse: Warehouse,
    issues: list[ParseIssue],
    progress: Progress | None,
) -> list[fr_dumps.Dump]:
    """Read the run's Flight Recorder dumps into fr_dumps, fr_process_groups and fr_entries (a part
    per dump); return the dumps loaded."""
    dumps = []
    for path in source.fr_dump_files:
        dump, found = fr_dumps.read(path, source.run_id)
        issues.extend(found)
        if dump is not None:
            dumps.append(dump)
        if progress:
            progress(path.stat().st_size)
    dumps = _drop_duplicate_dumps(dumps, issues)
    _write_rows(con, "fr_dumps", [d.row for d in dumps], warehouse.table_dir(version, "fr_dumps"))
    _write_rows(con, "fr_process_groups", [g for d in dumps for g in d.groups], warehouse.table_dir(version, "fr_process_groups"))
    folder = warehouse.table_dir(version, "fr_entries")
    table = sql.table("fr_entries")
    sql.use_macros(con)  # the table's sizes need dtype_bytes and friends
    parts = 0
    for batch in _batches([d.entries for d in dumps], FR_PART_ENTRIES):
        import pyarrow as pa  # only where there are dumps (see _write_rows)

        con.register("_fr_entries_input", pa.Table.from_pylist(batch))
        try:
            sql.write_parquet(con, f"({table.select()})", folder / f"part-{parts:05d}.parquet")
        finally:
            con.unregister("_fr_entries_input")
        parts += 1
    if not parts:
        sql.write_empty("fr_entries", folder / "part-empty.parquet")
    return dumps


# Entries per Parquet part of fr_entries: a write costs about as much for 2,000 rows as for 20,000.
FR_PART_ENTRIES = 100_000


def _batches(lists: list[list[dict]], size: int) -> Iterator[list[dict]]:
    """The rows of `lists`, in order, as batches of at least `size` rows (the last may be smaller)."""
    batch: list[dict] = []
    for rows in lists:
        batch.extend(rows)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _drop_duplicate_dumps(dumps: list[fr_dumps.Dump], issues: list[ParseIssue]) -> list[fr_dumps.Dump]:
    """One dump per rank and recorder: the collector's before torch's own, then the fuller, then the
    later, then one with stacks (torch's pickle) before one without (its JSON)."""
    def preference(dump: fr_dumps.Dump) -> tuple:
        row = dump.row
        stacks = any(entry["frames"] for entry in dump.entries)
        return (row["rank_source"] == "collector", row["entries"], row["dumped_at_ns"] or 0, stacks)

    kept: dict[tuple[int, str], fr_dumps.Dump] = {}
    for dump in sorted(dumps, key=preference, reverse=True):
        key = (dump.row["rank"], dump.row["recorder"])
        if key in kept:
            issues.append(ParseIssue(
                str(dump.file), None, None, "warning",
                f"not loaded: rank {key[0]}'s {key[1]} recorder is already read from {kept[key].file}",
            ))
            continue
        kept[key] = dump
    return sorted(kept.values(), key=lambda d: (d.row["rank"], d.row["recorder"]))


def _host_of(meta: dict, manifest: dict, rank: int) -> str | None:
    for entry in manifest.get("ranks", []) or []:
        if isinstance(entry, dict) and entry.get("rank") == rank and entry.get("host"):
            return str(entry["host"])
    host = meta.get("host_name") or meta.get("hostname")
    return str(host) if host else None


def _drop_duplicate_ranks(parsed: list[ParsedFile], issues: list[ParseIssue]) -> list[ParsedFile]:
    """Keep one file per rank and time range: a second file covering the same time is a copy.

    Files of one rank that cover different times (a profiler run over several cycles) are kept.
    """
    kept: list[ParsedFile] = []
    for candidate in parsed:
        row = candidate.row
        clash = next(
            (
                k for k in kept
                if k.row["rank"] == row["rank"] and _overlaps(k.row, row)
            ),
            None,
        )
        if clash is None:
            kept.append(candidate)
            continue
        candidate.part.unlink(missing_ok=True)
        issues.append(
            ParseIssue(
                row["trace_file"], None, None, "error",
                f"rank {row['rank']} is already covered over the same time by {clash.row['trace_file']}; this file was skipped",
            )
        )
    return kept


def _overlaps(a: dict, b: dict) -> bool:
    if None in (a["first_ns"], a["last_ns"], b["first_ns"], b["last_ns"]):
        return True
    return a["first_ns"] < b["last_ns"] and b["first_ns"] < a["last_ns"]


def _process_group_rows(run_id: str, kept: list[ParsedFile], metas: dict[int, dict]) -> list[dict]:
    rows = []
    for parsed in kept:
        info = metas[parsed.row["file_index"]].get("distributedInfo")
        groups = info.get("pg_config") if isinstance(info, dict) else None
        if not isinstance(groups, list):
            continue
        for group in groups:
            if not isinstance(group, dict):
                continue
            members = group.get("ranks")
            rows.append(
                {
                    "run_id": run_id,
                    "rank": parsed.row["rank"],
                    "pg_name": _text(group.get("pg_name")),
                    "pg_desc": _text(group.get("pg_desc")),
                    "backend": _text(group.get("backend_config")),
                    "pg_size": group.get("pg_size") if isinstance(group.get("pg_size"), int) else None,
                    "pg_ranks": members if isinstance(members, str) else json.dumps(members),
                }
            )
    return rows


def _link(source: RunSource, prefix: str) -> tuple[float | None, str | None]:
    """A line rate and where it came from: an override given at ingest, else the manifest."""
    given = source.overrides.get(f"{prefix}_gbps")
    if isinstance(given, (int, float)):
        return float(given), "override at ingest"
    value = source.manifest.get(f"{prefix}_gbps")
    if isinstance(value, (int, float)):
        return float(value), _text(source.manifest.get(f"{prefix}_source"))
    return None, None


def _missing_ranks(source: RunSource, found: set[int], world_size: int | None) -> list[ParseIssue]:
    """Ranks the world size promises but no trace holds, and ranks beyond it: both skew the analysis."""
    if not found or not world_size:
        return []
    missing = sorted(set(range(world_size)) - found)
    beyond = sorted(r for r in found if r >= world_size or r < 0)
    issues = []
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
        issues.append(
            ParseIssue(
                str(source.path), None, None, "warning",
                f"no trace for rank {shown} of world size {world_size}: cross-rank results cover the ranks found only",
            )
        )
    if beyond:
        issues.append(
            ParseIssue(str(source.path), None, None, "warning", f"traces for rank {', '.join(map(str, beyond))} beyond world size {world_size}")
        )
    return issues


def _run_row(
    source: RunSource, rank_rows: list[dict], metas: dict[int, dict], issues: list[ParseIssue], dumps: list[fr_dumps.Dump],
) -> dict:
    manifest = source.manifest
    link_gbps, link_source = _link(source, "link")
    intra_link_gbps, intra_link_source = _link(source, "intra_link")
    ranks_found = len({r["rank"] for r in rank_rows})
    trace_world = max((r["world_size"] for r in rank_rows if isinstance(r["world_size"], int)), default=None)
    if isinstance(manifest.get("world_size"), int):
        world_size, world_source = manifest["world_size"], "manifest"
        if trace_world is not None and trace_world != world_size:
            issues.append(
                ParseIssue(
                    str(source.path / "manifest.json"), None, None, "warning",
                    f"the manifest says world size {world_size} but the traces say {trace_world}",
                )
            )
    elif trace_world is not None:
        world_size, world_source = trace_world, "trace"
    elif dumps:
        stated = [d.row["world_size"] for d in dumps if d.row["world_size"]]
        world_size, world_source = max(stated) if stated else len({d.row["rank"] for d in dumps}), "flight recorder"
    else:
        world_size, world_source = ranks_found, "ranks found"
    issues.extend(_missing_ranks(source, {r["rank"] for r in rank_rows}, world_size))
    hosts = {r["host"] for r in rank_rows if r["host"]}
    tags = manifest.get("tags") if isinstance(manifest.get("tags"), dict) else {}
    backends = [r["backend"] for r in rank_rows if r["backend"]]
    nccl = [r["nccl_version"] for r in rank_rows if r["nccl_version"]]
    devices = [r["device_name"] for r in rank_rows if r["device_name"]]
    return {
        "run_id": source.run_id,
        "source_kind": source.kind,
        "source_path": str(source.path.absolute()),
        "job": _text(tags.get("job")) or _text(manifest.get("job")),
        "tags": json.dumps(tags),
        "world_size": world_size,
        "world_size_source": world_source,
        "ranks_found": ranks_found,
        "backend": _text(manifest.get("backend")) or (backends[0] if backends else None),
        "hosts": len(hosts) or None,
        "link_gbps": link_gbps,
        "link_source": link_source,
        "link_interface": _text(source.overrides.get("link_interface") or manifest.get("link_interface")),
        "intra_link_gbps": intra_link_gbps,
        "intra_link_source": intra_link_source,
        "device_model": _text(manifest.get("device_model")) or (devices[0] if devices else None),
        "torch_version": _text(manifest.get("torch_version")),
        "nccl_version": _text(manifest.get("nccl_version")) or (nccl[0] if nccl else None),
        "cuda_version": _text(manifest.get("cuda_version")),
        "started_ns": manifest.get("started_ns") if isinstance(manifest.get("started_ns"), int) else None,
        "ended_ns": manifest.get("ended_ns") if isinstance(manifest.get("ended_ns"), int) else None,
        "exit_code": manifest.get("exit_code") if isinstance(manifest.get("exit_code"), int) else None,
        "trace_files": len(rank_rows),
        "parse_errors": sum(1 for i in issues if i.severity == "error"),
        "ingested_at_ns": time.time_ns(),
    }


def _text(value) -> str | None:
    return None if value is None else str(value)


def _write_rows(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict], folder: Path) -> None:
    """Write Python rows as table `name`, typed and ordered by its SQL file's header."""
    if not rows:
        sql.write_empty(name, folder / "part-0.parquet")
        return
    import pyarrow as pa  # here, not above: it loads while the files parse (see stages.parse)

    table = sql.table(name)
    data = pa.table({c.name: [row.get(c.name) for row in rows] for c in table.columns})
    con.register(f"_{name}_input", data)
    try:
        sql.write_parquet(con, f"({table.select()})", folder / "part-0.parquet")
    finally:
        con.unregister(f"_{name}_input")
