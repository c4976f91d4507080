"""Read Flight Recorder dumps into the rows of fr_dumps, fr_entries and fr_process_groups.

A dump is one rank's recorder: torch's JSON (collectors/fr_format.py), with the collector's
`wirespeed` section when the collector wrote it, or torch's pickle of the same dicts (NCCL's dump
on a timeout, `_dump_fr_trace()`). A pickle is loaded by `pipelines.read.plain_pickle`, which builds
plain values only and refuses every global, so nothing in a file runs; its tuples become lists and
its None times "not discovered", as in the JSON. torch's own dumps carry no rank, so it comes from
the digits that end the file's name, as torchfrtrace takes it. Everything doubtful becomes a parse
issue naming the file and the entry, and the rest is kept: a file that does not load, an entry
without a field the matching needs, a value of the wrong type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from collectors import fr_format as fr
from pipelines.read import plain_pickle
from pipelines.read.issues import ParseIssue

# What an entry must have to be matched across ranks, and its type.
REQUIRED = {
    fr.RECORD_ID: int,
    fr.PROCESS_GROUP: list,
    fr.COLLECTIVE_SEQ_ID: int,
    fr.P2P_SEQ_ID: int,
    fr.PROFILING_NAME: str,
    fr.TIME_CREATED_NS: int,
    fr.INPUT_SIZES: list,
    fr.OUTPUT_SIZES: list,
}
# Skipped entries named one by one per file, then counted.
MAX_ENTRY_ISSUES = 20


@dataclass
class Dump:
    """One dump's rows: its fr_dumps row, its entries and the process groups it knows."""

    file: Path
    row: dict
    entries: list[dict] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)


def read(path: Path, run_id: str) -> tuple[Dump | None, list[ParseIssue]]:
    """The dump at `path`, or None with the reason when nothing of it can be used."""
    where = str(path)
    try:
        raw = path.read_bytes()
        data = plain_pickle.load(raw) if fr.is_pickle(raw) else orjson.loads(raw)
    except orjson.JSONDecodeError as bad:
        return None, [ParseIssue(where, bad.lineno, None, "error", f"not ingested: the Flight Recorder dump is not valid JSON ({bad.msg})")]
    except plain_pickle.NotPlain as bad:
        return None, [ParseIssue(where, None, None, "error", f"not loaded: a pickle that is not a plain Flight Recorder dump ({bad}); nothing in it ran")]
    except OSError as bad:
        return None, [ParseIssue(where, None, None, "error", f"not ingested: {bad}")]
    if not isinstance(data, dict):
        return None, [ParseIssue(where, 1, None, "error", "not ingested: a Flight Recorder dump is a JSON object (or the pickle of a dict)")]
    section = data.get(fr.SECTION) if isinstance(data.get(fr.SECTION), dict) else {}
    rank, rank_source = _int(section.get(fr.RANK)), "collector"
    if rank is None:
        rank, rank_source = fr.rank_from_name(path.name), "file name"
    if rank is None:
        return None, [ParseIssue(
            where, None, None, "error",
            "not ingested: a Flight Recorder dump without a rank: no wirespeed section, and the file name does not end "
            "in the rank (torch's and torchfrtrace's convention: <prefix><rank>)",
        )]
    raw_entries = data.get(fr.ENTRIES) or []
    issues: list[ParseIssue] = []
    if not isinstance(raw_entries, list):
        issues.append(ParseIssue(where, None, None, "error", f"'{fr.ENTRIES}' is not a list: no entry was read"))
        raw_entries = []
    entries, skipped = [], 0
    for index, entry in enumerate(raw_entries):
        problem = _problem(entry)
        if problem:
            skipped += 1
            if skipped <= MAX_ENTRY_ISSUES:
                issues.append(ParseIssue(where, None, None, "error", f"entry {index} skipped: {problem}"))
            continue
        entries.append(_entry_row(entry, run_id, rank, where))
    if skipped > MAX_ENTRY_ISSUES:
        issues.append(ParseIssue(where, None, None, "error", f"{skipped - MAX_ENTRY_ISSUES} more entries skipped for the same kinds of reason"))
    recorder = section.get(fr.RECORDER) if section.get(fr.RECORDER) in fr.RECORDERS else _recorder_of(data, entries)
    for row in entries:
        row["recorder"] = recorder
    created = [row["time_created_ns"] for row in entries]
    stacks = section.get(fr.STACKS) if isinstance(section.get(fr.STACKS), list) else []
    main = [s for s in stacks if isinstance(s, dict) and s.get("main")]
    others = [s for s in stacks if isinstance(s, dict) and not s.get("main")]
    row = {
        "run_id": run_id,
        "rank": rank,
        "rank_source": rank_source,
        "recorder": recorder,
        "file": where,
        "format_version": _text(data.get(fr.VERSION)),
        "comm_lib_version": _text(data.get(fr.COMM_LIB_VERSION)) or None,
        "host": _text(section.get(fr.HOST)),
        "pid": _int(section.get(fr.PID)),
        "world_size": _int(section.get(fr.WORLD_SIZE)),
        "reason": _text(section.get(fr.REASON)),
        "dumped_at_ns": _int(section.get(fr.DUMPED_AT_NS)),
        "buffer_entries": _int(section.get(fr.BUFFER_ENTRIES)),
        "entries": len(entries),
        "entries_skipped": skipped,
        "first_created_ns": min(created, default=None),
        "last_created_ns": max(created, default=None),
        "stack": _frames_text(main[0].get("frames")) if main else None,
        "other_stacks": "\n".join(f"thread {s.get('thread')}:\n{_frames_text(s.get('frames'))}" for s in others) or None,
        "earlier_dumps": json.dumps(section[fr.EARLIER]) if isinstance(section.get(fr.EARLIER), list) and section[fr.EARLIER] else None,
    }
    groups = _group_rows(data, section, entries, run_id, rank, recorder)
    return Dump(path, row, entries, groups), issues


def _problem(entry) -> str | None:
    """Why an entry cannot be matched across ranks, or None."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    for key, kind in REQUIRED.items():
        value = entry.get(key)
        if value is None:
            return f"no {key}"
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"{key} is {type(value).__name__}, not {kind.__name__}"
    group = entry[fr.PROCESS_GROUP]
    if len(group) != 2 or not all(isinstance(part, str) for part in group):
        return f"{fr.PROCESS_GROUP} is not [name, description]"
    if ":" not in entry[fr.PROFILING_NAME]:
        return f"{fr.PROFILING_NAME} {entry[fr.PROFILING_NAME]!r} is not <backend>:<op>"
    return None


def _entry_row(entry: dict, run_id: str, rank: int, file: str) -> dict:
    backend, _, name = entry[fr.PROFILING_NAME].partition(":")
    op, _, peers = name.partition(" ")
    duration = entry.get(fr.DURATION_MS)
    return {
        "run_id": run_id,
        "rank": rank,
        "file": file,
        "record_id": entry[fr.RECORD_ID],
        "pg_id": _int(entry.get(fr.PG_ID)),
        "pg_name": entry[fr.PROCESS_GROUP][0],
        "pg_desc": entry[fr.PROCESS_GROUP][1],
        "collective_seq_id": entry[fr.COLLECTIVE_SEQ_ID],
        "p2p_seq_id": entry[fr.P2P_SEQ_ID],
        "op_id": _int(entry.get(fr.OP_ID)),
        "is_p2p": bool(entry.get(fr.IS_P2P)),
        "profiling_name": entry[fr.PROFILING_NAME],
        "backend": backend,
        "fr_op": op,
        "peers": peers or None,
        "input_sizes": _json(entry[fr.INPUT_SIZES]),
        "input_dtypes": _json(entry.get(fr.INPUT_DTYPES) or []),
        "output_sizes": _json(entry[fr.OUTPUT_SIZES]),
        "output_dtypes": _json(entry.get(fr.OUTPUT_DTYPES) or []),
        "state": _text(entry.get(fr.STATE)),
        "retired": entry.get(fr.RETIRED) if isinstance(entry.get(fr.RETIRED), bool) else None,
        "time_created_ns": entry[fr.TIME_CREATED_NS],
        "started_ns": _int(entry.get(fr.TIME_STARTED_NS)) or None,  # 0: not discovered
        "completed_ns": _int(entry.get(fr.TIME_COMPLETED_NS)) or None,
        "duration_ms": float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else None,
        "timeout_ms": _int(entry.get(fr.TIMEOUT_MS)),
        "thread_id": _text(entry.get(fr.THREAD_ID)),
        "thread_name": _text(entry.get(fr.THREAD_NAME)),
        "frames": _frames_text(entry.get(fr.FRAMES)),
    }


def _recorder_of(data: dict, entries: list[dict]) -> str:
    """Which recorder a dump without the collector's section came from: NCCL's names its ops nccl:*."""
    if data.get(fr.NCCL_COMM_STATE) or any(row["backend"] == "nccl" for row in entries):
        return "nccl"
    return "generic"


def _group_rows(data: dict, section: dict, entries: list[dict], run_id: str, rank: int, recorder: str) -> list[dict]:
    """The process groups the dump knows: their members from the collector's section (what
    torch.distributed says), else from the recorder's pg_config when it has them (gloo's has none),
    and the recorder's status of each (pg_status, by the recorder's pg id)."""
    known: dict[str, dict] = {}
    configs = data.get(fr.PG_CONFIG) if isinstance(data.get(fr.PG_CONFIG), dict) else {}
    for name, config in configs.items():
        members = _members(config.get(fr.PG_RANKS)) if isinstance(config, dict) else None
        if name and members:
            known[name] = {"pg_desc": _text(config.get(fr.PG_DESC)), "members": members, "source": "recorder"}
    groups = section.get(fr.GROUPS) if isinstance(section.get(fr.GROUPS), list) else []
    for group in groups:
        members = _members(group.get(fr.PG_RANKS)) if isinstance(group, dict) else None
        if members and group.get(fr.PG_NAME) is not None:
            known[str(group[fr.PG_NAME])] = {"pg_desc": _text(group.get(fr.PG_DESC)), "members": members, "source": "collector"}
    ids = {}
    for row in entries:
        ids.setdefault(row["pg_name"], (row["pg_id"], row["pg_desc"]))
    status = data.get(fr.PG_STATUS) if isinstance(data.get(fr.PG_STATUS), dict) else {}
    rows = []
    for name in sorted(set(known) | set(ids), key=lambda n: (len(n), n)):
        pg_id, desc = ids.get(name, (None, None))
        group = known.get(name, {})
        counts = status.get(str(pg_id), {}) if pg_id is not None else {}
        counts = counts if isinstance(counts, dict) else {}
        members = group.get("members")
        rows.append({
            "run_id": run_id,
            "rank": rank,
            "recorder": recorder,
            "pg_name": name,
            "pg_desc": group.get("pg_desc") or desc,
            "pg_id": pg_id,
            "pg_ranks": json.dumps(members) if members else None,
            "pg_size": len(members) if members else None,
            "ranks_source": group.get("source", "unknown"),
            "last_enqueued": _status(counts.get(fr.LAST_ENQUEUED)),
            "last_started": _status(counts.get(fr.LAST_STARTED)),
            "last_completed": _status(counts.get(fr.LAST_COMPLETED)),
        })
    return rows


def _members(value) -> list[int] | None:
    """Global ranks of a group: a list, or the text of one as pg_config writes it ("[0, 1]")."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if isinstance(value, list) and value and all(isinstance(r, int) and not isinstance(r, bool) for r in value):
        return value
    return None


def _status(value) -> int | None:
    """A pg_status counter (text in JSON dumps); -1, never, is NULL."""
    number = _int(value)
    return None if number is None or number < 0 else number


def _frames_text(frames) -> str | None:
    """Frames as lines `name (file:line)`, innermost first."""
    if not isinstance(frames, list):
        return None
    lines = [
        f"{frame.get('name')} ({frame.get('filename')}:{frame.get('line')})"
        for frame in frames if isinstance(frame, dict)
    ]
    return "\n".join(lines) or None


def _json(value) -> str:
    """Compact JSON text of a value: `[[64,64]]`."""
    return orjson.dumps(value).decode()


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _text(value) -> str | None:
    return None if value is None else str(value)
