"""Reading traces: the fast cut, the exact decoder, and what each does with damaged files."""

from __future__ import annotations

import gzip
import json
import random
import re

import duckdb
import orjson
import pytest

from conftest import TRACES
from pipelines.read.kineto import normalize
from pipelines.read.kineto.exact import exact_trace
from pipelines.read.kineto.fields import ARG_KEYS
from pipelines.read.kineto.splitter import NotATrace, split_trace

NCCL_DATA = TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz"


def events_of(paths) -> list[dict]:
    """The events in chunk files (JSON arrays or NDJSON), parsed independently of DuckDB."""
    events = []
    for path in paths:
        data = path.read_bytes()
        if path.suffix == ".ndjson":
            events += [orjson.loads(line) for line in data.splitlines() if line]
        else:
            events += orjson.loads(data)
    return events


def kineto_text(events: list[dict], **meta) -> bytes:
    """A trace laid out the way Kineto writes it: one event per block of lines, `},\\n  {` between."""
    blocks = ",\n".join("  " + json.dumps(e, indent=2).replace("\n", "\n  ") for e in events)
    head = "".join(f'  "{k}": {json.dumps(v)},\n' for k, v in meta.items() if k != "baseTimeNanoseconds")
    tail = f',\n  "baseTimeNanoseconds": {meta["baseTimeNanoseconds"]}' if "baseTimeNanoseconds" in meta else ""
    return f'{{\n{head}  "traceEvents": [\n{blocks}\n  ]{tail}\n}}'.encode()


def sample_events(n: int, name: str = "k{i} ]}},{{\"x\"") -> list[dict]:
    """Events whose names hold brackets and a `},{`, so that a cut inside a string would show."""
    return [
        {"ph": "X", "cat": "kernel", "name": name.format(i=i), "pid": 0, "tid": 7, "ts": 1000.5 + i, "dur": 0.75,
         "args": {"correlation": i, "External id": i + 100}}
        for i in range(n)
    ]


def test_cut_keeps_every_event_and_the_metadata(tmp_path):
    events = sample_events(500)
    path = tmp_path / "t.json"
    path.write_bytes(kineto_text(events, schemaVersion=1, distributedInfo={"rank": 3}, baseTimeNanoseconds=17))
    cut = split_trace(path, tmp_path / "chunks", chunk_bytes=4096)
    assert len(cut.chunk_paths) > 5 and cut.layout == "kineto" and not cut.truncated
    assert events_of(cut.chunk_paths) == events
    assert cut.meta == {"schemaVersion": 1, "distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 17}


@pytest.mark.parametrize("separator", [", ", ","])
def test_cut_handles_one_line_traces(tmp_path, separator):
    events = sample_events(300, name="k{i} ]}}")
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + separator.join(json.dumps(e) for e in events) + '], "traceName": "x"}')
    cut = split_trace(path, tmp_path / "chunks", chunk_bytes=2048)
    assert cut.layout == "one-line" and len(cut.chunk_paths) > 3
    assert events_of(cut.chunk_paths) == events and cut.meta == {"traceName": "x"}


def test_bare_event_array(tmp_path):
    events = sample_events(20)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events))
    cut = split_trace(path, tmp_path / "chunks")
    assert events_of(cut.chunk_paths) == events and cut.meta == {}


@pytest.mark.parametrize("text", [b"", b"   \n", b"hello", b'{"a": 1}', b'{"traceEvents": 5}'])
def test_not_a_trace(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_bytes(text)
    with pytest.raises(NotATrace):
        split_trace(path, tmp_path / "chunks")


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.93, 0.999])
def test_cut_off_trace_keeps_every_complete_event(tmp_path, fraction):
    """A profiler killed mid-write: every event that was written whole is kept, the rest reported."""
    events = sample_events(400)
    text = kineto_text(events, schemaVersion=1)
    written = text[: int(len(text) * fraction)]
    path = tmp_path / "t.json"
    path.write_bytes(written)
    cut = split_trace(path, tmp_path / "chunks", chunk_bytes=3000)
    kept = events_of(cut.chunk_paths)
    # Every event whose closing brace (the only one indented by two spaces) made it to disk is kept.
    assert cut.truncated and kept == events[: written.count(b"\n  }")]
    assert [i.severity for i in cut.issues] == ["error"] and cut.issues[0].byte_offset is not None


def test_cut_gzip_stream_keeps_what_was_decompressed(tmp_path):
    events = sample_events(2000)
    packed = gzip.compress(kineto_text(events, schemaVersion=1))
    path = tmp_path / "t.json.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    cut = split_trace(path, tmp_path / "chunks")
    kept = events_of(cut.chunk_paths)
    assert cut.truncated and 0 < len(kept) < len(events) and kept == events[: len(kept)]
    assert any("compressed stream ends early" in i.reason for i in cut.issues)


def test_exact_path_reads_what_the_cut_reads(tmp_path):
    cut = split_trace(NCCL_DATA, tmp_path / "cut")
    exact = exact_trace(NCCL_DATA, tmp_path / "exact", frozenset(ARG_KEYS))
    assert exact.issues == [] and not exact.truncated
    assert exact.events_kept == len(events_of(cut.chunk_paths))
    assert exact.meta["baseTimeNanoseconds"] == cut.meta["baseTimeNanoseconds"] == 1711964646000000000


def test_exact_path_skips_bad_events_and_keeps_the_rest(tmp_path):
    events = sample_events(50)
    events[10]["ts"] = "not a number"
    events[20]["args"] = "not an object"
    text = kineto_text(events, schemaVersion=1).replace(b'"k30 ', b'"k30 \xff\xfe ')  # invalid UTF-8
    text = text.replace(b'{\n    "ph": "X",\n    "cat": "kernel",\n    "name": "k40', b'{\n    "ph": X garbage "k40', 1)
    path = tmp_path / "t.json"
    path.write_bytes(text)
    exact = exact_trace(path, tmp_path / "exact", frozenset(ARG_KEYS))
    kept = events_of(exact.chunk_paths)
    names = [e["name"].split(" ")[0] for e in kept]
    assert "k10" not in names and "k40" not in names and len(kept) == 48
    assert "k20" in names and "k30" in names and "\ufffd" in kept[names.index("k30")]["name"]
    reasons = " | ".join(f"{i.line}: {i.reason}" for i in exact.issues)
    assert "non-numeric ts" in reasons and "malformed event skipped" in reasons
    assert "args that are not an object" in reasons and "invalid UTF-8" in reasons
    assert all(i.line for i in exact.issues)


def test_fast_path_falls_back_to_exact_on_bad_values(tmp_path):
    events = sample_events(30)
    events[5]["args"] = "not an object"  # valid JSON that DuckDB's typed reader refuses
    path = tmp_path / "t.json"
    path.write_bytes(kineto_text(events, schemaVersion=1, distributedInfo={"rank": 0}))
    con = duckdb.connect()
    trace = normalize.read_trace(path, tmp_path / "work")
    assert trace.parser == "fast"
    trace = normalize.write_events(con, trace, tmp_path / "work", tmp_path / "e.parquet", "r", 0, 0)
    assert trace.parser == "exact"
    assert con.execute("SELECT count(*) FROM read_parquet($p)", {"p": str(tmp_path / "e.parquet")}).fetchall() == [(30,)]
    assert any("read event by event" in i.reason for i in trace.issues)


def test_times_read_as_doubles_keep_every_nanosecond(tmp_path):
    """Relative times are read as doubles: thousands of them, anywhere within 101 days of the
    base, each with three decimals, come out to the nanosecond (a plain `ts * 1000` misses
    about one in four hundred)."""
    base_ns = 1_700_000_000_000_000_000
    rng = random.Random(7)
    wanted = [rng.randrange(-(2**43 - 1) * 1000, (2**43 - 1) * 1000) for _ in range(20_000)]
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": f"T{i}", "dur": 1} for i in range(len(wanted))]
    as_written = [f"{'-' if ns < 0 else ''}{abs(ns) // 1000}.{abs(ns) % 1000:03d}" for ns in wanted]
    text = re.sub(r'"T(\d+)"', lambda m: as_written[int(m.group(1))], kineto_text(events, baseTimeNanoseconds=base_ns).decode())
    path = tmp_path / "t.json"
    path.write_text(text)
    con = duckdb.connect()
    trace = normalize.read_trace(path, tmp_path / "work")
    normalize.write_events(con, trace, tmp_path / "work", tmp_path / "e.parquet", "r", 0, 0)
    got = [ns for (ns,) in con.execute("SELECT ts_ns FROM read_parquet($p)", {"p": str(tmp_path / "e.parquet")}).fetchall()]
    assert sorted(got) == sorted(base_ns + ns for ns in wanted)


def test_relative_and_absolute_timestamps(tmp_path):
    con = duckdb.connect()
    for name, meta, ts, expected in [
        ("relative", {"baseTimeNanoseconds": 1_700_000_000_000_000_000}, "1234.567", 1_700_000_000_001_234_567),
        ("before its base", {"baseTimeNanoseconds": 1_700_000_000_000_000_000}, "-1234.567", 1_699_999_999_998_765_433),
        # Too far from its base for a double to hold the nanoseconds: read again as a decimal.
        ("far from its base", {"baseTimeNanoseconds": 1_000_000}, "1000000000000123.457", 1_000_000_000_001_123_457),
        ("absolute", {}, "1700000000123456.789", 1_700_000_000_123_456_789),
        ("integer", {}, "1700000000123456", 1_700_000_000_123_456_000),
    ]:
        name = name.replace(" ", "-")
        path = tmp_path / f"{name}.json"
        # The timestamp goes in as written: a Python float could not even hold it.
        text = kineto_text([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "TS", "dur": 1}], **meta)
        path.write_bytes(text.replace(b'"TS"', ts.encode()))
        trace = normalize.read_trace(path, tmp_path / name)
        out = tmp_path / f"{name}.parquet"
        normalize.write_events(con, trace, tmp_path / name, out, "r", 0, 0)
        assert con.execute("SELECT ts_ns, dur_ns FROM read_parquet($p)", {"p": str(out)}).fetchall() == [(expected, 1000)]
