"""Generate realistic multi-rank trace sets of any size, for benchmarks, from a real Kineto trace.

The source trace's events are tiled in time: copy k of the events is shifted by k times the
source's span, its ProfilerStep numbers move on by k times the source's steps, and its correlation,
External id and flow ids are renumbered so that they stay unique and still pair launches with
kernels. Every rank gets its own copy with its own rank in `distributedInfo`, and a small
rank-dependent jitter so ranks differ as they do. Files are written the way Kineto writes them: one
event per block of lines, `},\\n  {` between events, metadata around the array, baseTimeNanoseconds
at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import BinaryIO

import orjson
from isal import igzip

from pipelines.read.kineto.splitter import open_trace

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
ID_ARGS = ("correlation", "External id")
_TIMING = ("ts", "dur")


def load(path: Path) -> tuple[dict, list[dict]]:
    with open_trace(path) as stream:
        trace = orjson.loads(stream.read())
    return trace, trace.pop("traceEvents")


def tiles_for(events: list[dict], target_bytes: int) -> int:
    """How many copies of the events make about `target_bytes` of trace."""
    tile_bytes = sum(len(_block(e)) + 2 for e in events)
    return max(1, round(target_bytes / tile_bytes))


def write_rank(
    out: Path, meta: dict, events: list[dict], rank: int, world_size: int, tiles: int, ndjson: Path | None = None
) -> int:
    """Write one rank's trace of `tiles` copies of `events`; return the bytes written.

    With `ndjson`, the same events are also written there one per line, for the readers that
    need that layout.
    """
    times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))) - min(times)
    steps = [int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))]
    step_count = (max(steps) - min(steps) + 1) if steps else 0
    id_span = max((int(e["args"][k]) for e in events for k in ID_ARGS if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)), default=0) + 1
    flow_span = max((int(e["id"]) for e in events if isinstance(e.get("id"), int)), default=0) + 1
    header = dict(meta)
    base = header.pop("baseTimeNanoseconds", None)
    info = dict(header.get("distributedInfo") or {})
    info.update(rank=rank, world_size=world_size)
    header["distributedInfo"] = info
    written = 0
    with open(out, "wb") as handle, open(ndjson or os.devnull, "wb") as lines:
        # Python's separators, as PyTorch writes `distributedInfo`: HTA finds the rank with `"rank":\s+`.
        written += _write(handle, b"{\n" + b"".join(b'  "%s": %s,\n' % (k.encode(), json.dumps(v).encode()) for k, v in header.items()))
        written += _write(handle, b'  "traceEvents": [\n')
        first = True
        jitter = rank * 0.137
        for tile in range(tiles):
            shift = tile * span * 1.0001 + jitter
            for event in events:
                copy = _shifted(event, shift, tile, step_count, id_span, flow_span)
                written += _write(handle, (b"" if first else b",\n") + _block(copy))
                if ndjson is not None:
                    lines.write(orjson.dumps(copy) + b"\n")
                first = False
        tail = b"\n  ]" + (b',\n  "baseTimeNanoseconds": %d' % base if base is not None else b"") + b"\n}\n"
        written += _write(handle, tail)
    return written


def _write(handle: BinaryIO, data: bytes) -> int:
    handle.write(data)
    return len(data)


def _shifted(event: dict, shift: float, tile: int, step_count: int, id_span: int, flow_span: int) -> dict:
    if tile == 0 and shift == 0:
        return event
    copy = dict(event)
    if isinstance(copy.get("ts"), (int, float)):
        copy["ts"] = round(copy["ts"] + shift, 3)
    step = _STEP.match(str(copy.get("name", "")))
    if step and tile:
        copy["name"] = f"ProfilerStep#{int(step.group(1)) + tile * step_count}"
    if isinstance(copy.get("id"), int):
        copy["id"] = copy["id"] + tile * flow_span
    args = copy.get("args")
    if isinstance(args, dict) and tile and any(isinstance(args.get(k), int) for k in ID_ARGS):
        args = dict(args)
        for key in ID_ARGS:
            if isinstance(args.get(key), int):
                args[key] = args[key] + tile * id_span
        copy["args"] = args
    return copy


def _block(event: dict) -> bytes:
    """One event as Kineto lays it out: its identity on one line, `ts` and `dur` on the next, then
    `args` in a block of its own, between `  {` and `  }`."""
    lines = []
    head = [key for key in event if key not in _TIMING and key != "args"]
    if head:
        lines.append(_fields(event, head))
    timing = [key for key in _TIMING if key in event]
    if timing:
        lines.append(_fields(event, timing))
    if isinstance(event.get("args"), dict):
        args = event["args"]
        lines.append(b'"args": {\n      ' + _fields(args, list(args)) + b"\n    }" if args else b'"args": {}')
    return b"  {\n    " + b",\n    ".join(lines) + b"\n  }"


def _fields(values: dict, keys: list[str]) -> bytes:
    return b", ".join(orjson.dumps(key) + b": " + orjson.dumps(values[key]) for key in keys)


def generate(source: Path, out_dir: Path, ranks: int, bytes_per_rank: int, ndjson_dir: Path | None = None) -> list[Path]:
    """A run folder of `ranks` trace files of about `bytes_per_rank` bytes each."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if ndjson_dir is not None:
        ndjson_dir.mkdir(parents=True, exist_ok=True)
    meta, events = load(source)
    tiles = tiles_for(events, bytes_per_rank)
    paths = []
    for rank in range(ranks):
        path = out_dir / f"rank{rank}.pt.trace.json"
        lines = ndjson_dir / f"rank{rank}.ndjson" if ndjson_dir is not None else None
        write_rank(path, meta, events, rank, ranks, tiles, lines)
        paths.append(path)
    return paths


def gzip_copies(paths: list[Path], out_dir: Path) -> list[Path]:
    """Gzip each trace into `out_dir` (as torch.profiler's `.json.gz` export does), streaming."""
    out_dir.mkdir(parents=True, exist_ok=True)
    copies = []
    for path in paths:
        target = out_dir / (path.name + ".gz")
        with open(path, "rb") as plain, igzip.open(target, "wb") as packed:
            shutil.copyfileobj(plain, packed, 8 << 20)
        copies.append(target)
    return copies
