"""Bad input, faults and hostile names, built from the real traces and logs in ../shared.

Each test cuts, corrupts or injects into a real file, or runs real processes against a real
warehouse, and checks the three promises: nothing crashes, every skip is recorded with its file
and place, and every intact event is kept. Raw inputs are checked to be byte-for-byte unchanged.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import orjson
import pytest
from conftest import REPO, SHARED, TRACES, ingest_directly, wirespeed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.read.kineto import normalize
from pipelines.read.kineto.splitter import NotATrace
from pipelines.read.nccl.logfile import read_log
from pipelines.settings import Settings
from pipelines.testbed.bench import synth
from pipelines.warehouse import rollups
from pipelines.warehouse.store import GRACE_SECONDS, Warehouse

SAMPLED = TRACES / "hta_sampled_2rank"
LOGS = SHARED / "nccl_logs"


def kineto_layout(meta: dict, events: list[dict]) -> bytes:
    """A trace laid out as Kineto writes it: a block of lines per event, the time base at the end."""
    head = b"".join(b'  "%s": %s,\n' % (k.encode(), orjson.dumps(v)) for k, v in meta.items() if k != "baseTimeNanoseconds")
    tail = b',\n  "baseTimeNanoseconds": %d' % meta["baseTimeNanoseconds"] if "baseTimeNanoseconds" in meta else b""
    blocks = b",\n".join(b"  " + orjson.dumps(e, option=orjson.OPT_INDENT_2).replace(b"\n", b"\n  ") for e in events)
    return b"{\n" + head + b'  "traceEvents": [\n' + blocks + b"\n  ]" + tail + b"\n}\n"


# A real trace (rank 0 of HTA's sampled pair), in Kineto's own layout, small enough to ingest a
# hundred times.
_META, REAL_EVENTS = synth.load(SAMPLED / "sampled_rank-0.json.gz")
REAL_TRACE = kineto_layout(_META, REAL_EVENTS)
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def kept_events(path: Path, work: Path) -> tuple[list[tuple], normalize.ReadTrace]:
    """Ingest one trace file as the pipeline does and return its events (name, ts) in file order."""
    con = duckdb.connect()
    try:
        trace = normalize.read_trace(path, work / "cut")
        trace = normalize.write_events(con, trace, work, work / "events.parquet", "r", 0, 0)
        rows = con.execute(
            "SELECT name, ts_ns FROM read_parquet($p) ORDER BY ts_ns, name", {"p": str(work / "events.parquet")}
        ).fetchall()
    finally:
        con.close()
        normalize.cleanup(work / "cut")
    return rows, trace


def event_ends(text: bytes) -> list[int]:
    """Byte offset just past each event of a Kineto-laid-out trace, found without a JSON parser."""
    start = text.index(b'"traceEvents": [')
    ends = [m.start() + 1 for m in re.finditer(rb"\},\n  \{", text[start:])]
    ends = [start + e for e in ends]
    ends.append(text.rindex(b"}\n  ]") + 1)
    return ends


def expected(events: list[dict]) -> list[tuple]:
    """What trace_events should hold for these raw events: all but flow arrows, in time order."""
    base = _META.get("baseTimeNanoseconds", 0)
    rows = []
    for e in events:
        if e.get("ph") in ("s", "f"):
            continue
        ts = e.get("ts")
        rows.append((e.get("name"), None if ts is None else base + round(ts * 1000)))
    return sorted(rows, key=lambda r: (r[1] is None, r[1], r[0]))


def digest(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- traces cut off -------------------------------------------------------------------------------


@EXAMPLES
@given(fraction=st.floats(0.02, 0.98))
def test_a_trace_cut_anywhere_keeps_every_complete_event(tmp_path_factory, fraction):
    """The profiler killed while writing: every event that made it to disk whole is kept."""
    work = tmp_path_factory.mktemp("cut")
    ends = event_ends(REAL_TRACE)
    cut_at = int(len(REAL_TRACE) * fraction)
    path = work / "rank0.json"
    path.write_bytes(REAL_TRACE[:cut_at])
    rows, trace = kept_events(path, work)
    complete = sum(1 for end in ends if end <= cut_at)
    # No baseTimeNanoseconds (it is at the end), so times stay relative; compare names and order.
    assert [name for name, _ in rows] == [name for name, _ in _relative(REAL_EVENTS[:complete])]
    assert trace.truncated
    assert any(i.severity == "error" and "cut off" in i.reason and str(path) == i.file for i in trace.issues)


def _relative(events: list[dict]) -> list[tuple]:
    rows = [(e.get("name"), round(e["ts"] * 1000)) for e in events if e.get("ph") not in ("s", "f") and "ts" in e]
    return sorted(rows, key=lambda r: (r[1], r[0]))


@EXAMPLES
@given(fraction=st.floats(0.05, 0.95))
def test_a_gzip_trace_cut_anywhere_keeps_a_prefix_and_says_where(tmp_path_factory, fraction):
    work = tmp_path_factory.mktemp("gzcut")
    packed = gzip.compress(REAL_TRACE)
    path = work / "rank0.json.gz"
    path.write_bytes(packed[: int(len(packed) * fraction)])
    rows, trace = kept_events(path, work)
    names = [name for name, _ in rows]
    full = [name for name, _ in _relative(REAL_EVENTS)]
    # What was kept is exactly the trace's first events (in time order, they interleave; compare sets).
    assert len(names) < len(full) and sorted(names) == sorted(_names_of_first(len(rows)))
    assert trace.truncated and any("cut off" in i.reason or "ends early" in i.reason for i in trace.issues)


def _names_of_first(count: int) -> list:
    kept = [e for e in REAL_EVENTS if e.get("ph") not in ("s", "f")][:count]
    return [e.get("name") for e in kept]


# --- values a parser must survive ------------------------------------------------------------------


def _inject(replacements: list[tuple[bytes, bytes]]) -> bytes:
    text = REAL_TRACE
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def _first_kernel() -> dict:
    return next(e for e in REAL_EVENTS if e.get("cat") == "kernel")


def _event_text(event: dict) -> bytes:
    return b"  " + orjson.dumps(event, option=orjson.OPT_INDENT_2).replace(b"\n", b"\n  ")


KERNEL = _first_kernel()
INJECTIONS = {
    # name: (bytes replaced, replacement, words of the recorded issue, events of rank 0 lost)
    "non-numeric ts": (b'"ts": %s' % orjson.dumps(KERNEL["ts"]), b'"ts": "soon"', "non-numeric ts", 1),
    "negative dur": (b'"dur": %s' % orjson.dumps(KERNEL["dur"]), b'"dur": -5', "negative duration", 0),
    "dur over 7 days": (b'"dur": %s' % orjson.dumps(KERNEL["dur"]), b'"dur": 700000000000', "over 7 days", 0),
    "Comms Id beyond int64": (b'"correlation": %d' % KERNEL["args"]["correlation"],
                              b'"correlation": %d, "Comms Id": 18446744073709551615' % KERNEL["args"]["correlation"], None, 0),
    "invalid UTF-8 in a name": (orjson.dumps(KERNEL["name"]), orjson.dumps(KERNEL["name"])[:-1] + b'\xff\xfe"', "invalid UTF-8", 0),
    "garbage between events": (b"},\n  {", b"}, \x00garbage!, {", "malformed event skipped", 0),
    "an event cut in two": (b'"ts": %s' % orjson.dumps(KERNEL["ts"]), b'"ts": ', "malformed event skipped", 1),
}


@pytest.mark.parametrize("name", INJECTIONS)
def test_bad_values_are_recorded_and_every_other_event_kept(tmp_path, name):
    old, new, reason, lost = INJECTIONS[name]
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.json").write_bytes(_inject([(old, new)]))
    (run / "rank1.json.gz").write_bytes((SAMPLED / "sampled_rank-1.json.gz").read_bytes())
    before = digest(run)
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    run_id = ingest_directly(store, run)
    con = store.connect()
    try:
        per_rank = dict(con.execute("SELECT rank, count(*) FROM trace_events GROUP BY rank").fetchall())
        issues = con.execute("SELECT file, line, byte_offset, severity, reason FROM parse_issues").fetchall()
        published = con.execute("SELECT count(*) FROM runs WHERE run_id = $r", {"r": run_id}).fetchall()[0][0]
        comms_ids = con.execute("SELECT DISTINCT comms_id FROM trace_events WHERE comms_id IS NOT NULL").fetchall()
    finally:
        con.close()
    wanted = len(expected(REAL_EVENTS))
    assert published == 1
    if name == "Comms Id beyond int64":
        assert comms_ids == [(18446744073709551615,)]
    # The intact rank loses nothing; the damaged one only the event that was hit, if any.
    assert per_rank[1] == len(expected(synth.load(SAMPLED / "sampled_rank-1.json.gz")[1]))
    assert per_rank[0] == wanted - lost
    mine = [i for i in issues if i[0].endswith("rank0.json")]
    if reason:
        assert any(reason in i[4] for i in mine), (name, issues)
    assert not any(i[0].endswith("rank1.json.gz") for i in issues)
    assert digest(run) == before


@EXAMPLES
@given(data=st.data())
def test_random_corruption_never_crashes_and_never_goes_unrecorded(tmp_path_factory, data):
    """Flip a few bytes anywhere: the file is read, and any loss is a recorded issue."""
    work = tmp_path_factory.mktemp("corrupt")
    text = bytearray(REAL_TRACE)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(text) - 1))
        text[position] = data.draw(st.integers(0, 255))
    path = work / "rank0.json"
    path.write_bytes(bytes(text))
    try:
        rows, trace = kept_events(path, work)
    except NotATrace:
        return  # the corruption hit the document's opening: rejected as a whole, with a reason
    lost = len(expected(REAL_EVENTS)) - len(rows)
    if lost > 0:
        assert trace.issues, "events were lost without an issue"
        assert all(i.file == str(path) for i in trace.issues)


# --- NCCL logs -------------------------------------------------------------------------------------


def _log_lines() -> list[str]:
    return (LOGS / "nccl-584-2.7-sendrecv-coll.log").read_text().splitlines()


@EXAMPLES
@given(garbage=st.lists(st.one_of(st.binary(min_size=1, max_size=80), st.text(max_size=120)), max_size=12), data=st.data())
def test_nccl_logs_with_garbage_lines_keep_every_real_record(tmp_path_factory, garbage, data):
    """Binary junk, unknown future lines and stray text between real lines change nothing else."""
    work = tmp_path_factory.mktemp("log")
    lines = [line.encode() for line in _log_lines()]
    clean = work / "clean.log"
    clean.write_bytes(b"\n".join(lines) + b"\n")
    dirty_lines = list(lines)
    for junk in garbage:
        junk = junk if isinstance(junk, bytes) else f"NCCL INFO {junk}".encode()
        junk = junk.replace(b"\n", b" ").replace(b"\r", b" ")
        dirty_lines.insert(data.draw(st.integers(0, len(dirty_lines))), b"\x00" + junk)
    dirty = work / "dirty.log"
    dirty.write_bytes(b"\n".join(dirty_lines) + b"\n")
    expected_rows = read_log(clean, "r")
    got = read_log(dirty, "r")
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("line", "log_file")} for r in rows]  # noqa: E731
    assert strip(got.calls) == strip(expected_rows.calls)
    assert strip(got.comms) == strip(expected_rows.comms)


@EXAMPLES
@given(fraction=st.floats(0.01, 0.99))
def test_nccl_log_cut_mid_line_says_so(tmp_path_factory, fraction):
    work = tmp_path_factory.mktemp("logcut")
    data = (LOGS / "nccl-1453-2.2x-h100-2node-ibext-gdrdma-channels.log").read_bytes()
    cut = int(len(data) * fraction)
    path = work / "cut.log"
    path.write_bytes(data[:cut])
    rows = read_log(path, "r")
    if not data[:cut].endswith(b"\n") and data[:cut].split(b"\n")[-1].strip():
        assert any("middle of this line" in i.reason for i in rows.issues)
    # Every whole line before the cut gives exactly what it gives in a log that ends there.
    whole = work / "whole.log"
    whole.write_bytes(data[: data.rfind(b"\n", 0, cut) + 1])
    expected_rows = read_log(whole, "r")
    strip = lambda found: [{k: v for k, v in r.items() if k != "log_file"} for r in found]  # noqa: E731
    for records in ("comms", "connections", "calls", "messages", "tests"):
        assert strip(getattr(rows, records)) == strip(getattr(expected_rows, records)), records
    assert fraction < 0.5 or expected_rows.connections, "the log's second half holds connections"


# --- runs as a whole: ranks, manifests ---------------------------------------------------------------


def ingest_and_query(tmp_path: Path, run: Path, *queries: str) -> list[list[tuple]]:
    """Ingest a run folder into a fresh warehouse; the rows of each query over it."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, run)
    con = store.connect()
    try:
        return [con.execute(query).fetchall() for query in queries]
    finally:
        con.close()


def test_duplicated_and_missing_rank_files_are_reported(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "rank0.json.gz").write_bytes((SAMPLED / "sampled_rank-0.json.gz").read_bytes())
    (run / "rank0-copy.json.gz").write_bytes((SAMPLED / "sampled_rank-0.json.gz").read_bytes())
    issues, ranks = ingest_and_query(tmp_path, run, "SELECT reason FROM parse_issues", "SELECT rank FROM ranks")
    reasons = [r[0] for r in issues]
    assert ranks == [(0,)]
    assert any("already covered over the same time" in r for r in reasons)
    # The trace says it is rank 0 of 128 (HTA sampled two ranks of a larger job).
    assert any(r.startswith("no trace for rank 1, 2, 3,") and "of world size 128" in r for r in reasons)


def test_a_manifest_that_contradicts_the_traces_is_reported(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    for rank in (0, 1):
        (run / "traces" / f"rank{rank}.json.gz").write_bytes((SAMPLED / f"sampled_rank-{rank}.json.gz").read_bytes())
    (run / "manifest.json").write_text(json.dumps({"run_id": "contradicted", "world_size": 4}))
    issues, world = ingest_and_query(
        tmp_path, run, "SELECT reason FROM parse_issues", "SELECT world_size, world_size_source, ranks_found FROM runs"
    )
    reasons = [r[0] for r in issues]
    assert world == [(4, "manifest", 2)]
    assert any("manifest says world size 4 but the traces say 128" in r for r in reasons)
    assert any("no trace for rank 2, 3 of world size 4" in r for r in reasons)


def test_a_malformed_manifest_is_reported_and_the_traces_still_ingest(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "traces" / "rank0.json.gz").write_bytes((SAMPLED / "sampled_rank-0.json.gz").read_bytes())
    (run / "manifest.json").write_text('{"run_id": "half-writ')
    issues, events = ingest_and_query(
        tmp_path, run, "SELECT file, line, reason FROM parse_issues WHERE file LIKE '%manifest.json'", "SELECT count(*) FROM trace_events"
    )
    assert issues and issues[0][1] == 1 and "does not parse" in issues[0][2]
    assert events[0][0] > 0



def test_a_samples_file_with_other_columns_is_named_and_the_rest_still_ingest(tmp_path):
    """One host's counter file is not the sampler's (four columns, no host): it is named, and the
    other host's samples and the traces still ingest."""
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "samples").mkdir()
    (run / "traces" / "rank0.json.gz").write_bytes((SAMPLED / "sampled_rank-0.json.gz").read_bytes())
    (run / "samples" / "net.host0.csv").write_text("t_ns,interface,rx_bytes,tx_bytes\n1,eth0,1,1\n")
    (run / "samples" / "net.host1.csv").write_text("t_ns,host,interface,rx_bytes,tx_bytes\n1,host1,eth0,1,1\n2,host1,eth0,9,9\n")
    (run / "manifest.json").write_text(json.dumps({"run_id": "run", "world_size": 1}))
    issues, samples = ingest_and_query(
        tmp_path, run, "SELECT file, severity, reason FROM parse_issues WHERE file LIKE '%.csv'",
        "SELECT host, count(*) FROM net_samples GROUP BY host",
    )
    assert [(Path(f).name, severity) for f, severity, _ in issues] == [("net.host0.csv", "error")]
    assert "not counter samples" in issues[0][2]
    assert samples == [("host1", 2)]

# --- faults: killed ingests, repeats, two at once -------------------------------------------------------


def _table_rows(warehouse: Path, run_id: str) -> dict[str, list]:
    """Every published table's rows for one run, sorted, without the columns that name the ingest."""
    store = Warehouse(warehouse)
    con = store.connect()
    try:
        tables = [r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
        out = {}
        for table in tables:
            columns = [r[0] for r in con.execute(f'DESCRIBE "{table}"').fetchall()]
            if "run_id" not in columns:
                continue
            keep = [c for c in columns if c not in ("ingested_at_ns", "parse_seconds")]
            select = ", ".join(f'"{c}"' for c in keep)
            out[table] = sorted(
                con.execute(f'SELECT {select} FROM "{table}" WHERE run_id = $r', {"r": run_id}).fetchall(), key=repr
            )
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def big_run(tmp_path_factory) -> Path:
    """A run large enough that an ingest takes seconds: 4 ranks of tiled real trace."""
    folder = tmp_path_factory.mktemp("big") / "big"
    synth.generate(REPO / "examples" / "nccl_data.json.gz", folder, ranks=4, bytes_per_rank=60 * 10**6)
    return folder


def test_a_killed_ingest_leaves_the_previous_version(tmp_path, big_run):
    warehouse = tmp_path / "warehouse"
    small = tmp_path / "small"
    small.mkdir()
    (small / "rank0.json.gz").write_bytes((SAMPLED / "sampled_rank-0.json.gz").read_bytes())
    wirespeed("ingest", str(small), "--run-id", "the-run", "--warehouse", str(warehouse), "--quiet")
    before = _table_rows(warehouse, "the-run")
    inputs = digest(big_run)

    ingest = subprocess.Popen(
        [sys.executable, "-m", "pipelines.commands.cli", "ingest", str(big_run), "--run-id", "the-run",
         "--warehouse", str(warehouse), "--quiet"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    # Kill it once it is writing the new version's parse tables.
    deadline = time.monotonic() + 120
    while not list((warehouse / "versions").glob("*/*/trace_events/*.parquet"))[1:]:
        assert ingest.poll() is None and time.monotonic() < deadline, "the ingest ended before it could be killed"
        time.sleep(0.05)
    os.killpg(ingest.pid, signal.SIGKILL)
    ingest.wait()

    assert _table_rows(warehouse, "the-run") == before
    assert digest(big_run) == inputs
    # The next ingest of the run goes through and replaces it.
    wirespeed("ingest", str(big_run), "--run-id", "the-run", "--warehouse", str(warehouse), "--quiet")
    after = _table_rows(warehouse, "the-run")
    assert len(after["ranks"]) == 4 and after != before


def test_a_replaced_version_is_kept_for_the_grace_period_from_its_replacement(tmp_path):
    """A query may have resolved a link to the version that is then replaced (a session reads the
    roll-ups' version by its own folder), so a replaced version is deleted GRACE_SECONDS after it
    was replaced, however long it had been published before; a run's versions and the roll-ups'
    alike."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    long_ago = time.time() - 2 * GRACE_SECONDS

    def published_long_ago(folder: Path) -> Path:
        os.utime(folder, (long_ago, long_ago))
        return folder

    def publish_run(key: str) -> Path:
        version = store.start_version("r", key, ())
        store.publish("r", version)
        return version

    def publish_rollups(_key: str) -> Path:
        rollups.publish(store, Settings())
        return store.published_rollups()

    for publish in (publish_run, publish_rollups):
        first = published_long_ago(publish("first"))
        second = publish("second")
        assert first.exists()  # replaced just now
        published_long_ago(first)
        third = publish("third")
        assert not first.exists() and second.exists() and third.exists(), publish.__name__


def test_a_session_keeps_reading_the_run_versions_it_opened_on_while_a_run_is_ingested_again(tmp_path):
    """A report's queries, a roll-up update's, an analyst's `wirespeed sql` run in a session opened
    before a run may be ingested again. The session reads each run's version published when it
    opened, by its own folder, not through the run's link: its queries agree with each other, and
    no file it reads is replaced under a query (DuckDB opens a file more than once in a query)."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, SAMPLED / "sampled_rank-0.json.gz", run_id="r", key="first")
    before = store.connect(tables=("trace_events",))
    read = [path for folder in store.run_variables()["run_dirs"] for path in Path(folder).rglob("*.parquet")]
    files = {path: (path.stat().st_ino, path.read_bytes()) for path in read}
    (first_count,) = before.execute("SELECT count(*) FROM trace_events").fetchone()

    ingest_directly(store, SAMPLED / "sampled_rank-1.json.gz", run_id="r", key="second")
    after = store.connect(tables=("trace_events",))
    try:
        assert {path: (path.stat().st_ino, path.read_bytes()) for path in files} == files
        assert before.execute("SELECT count(*), min(rank) FROM trace_events").fetchone() == (first_count, 0)
        (second_count, rank) = after.execute("SELECT count(*), min(rank) FROM trace_events").fetchone()
        assert rank == 1 and second_count != first_count
    finally:
        before.close()
        after.close()


def test_a_run_from_before_a_table_existed_reads_as_none_of_its_rows(tmp_path):
    """A run ingested by an older wirespeed has no folder for a table added since; sessions over
    every run, or over that run alone (`wirespeed sql --run`), read no rows of it there."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, SAMPLED / "sampled_rank-0.json.gz", run_id="old")
    shutil.rmtree(store.published("old") / "steps")
    for runs in (None, ["old"]):
        con = store.connect(runs=runs, tables=("steps", "runs"))
        try:
            assert con.execute("SELECT (SELECT count(*) FROM steps), (SELECT count(*) FROM runs)").fetchone() == (0, 1)
        finally:
            con.close()


def test_rollups_kept_before_they_were_versioned_are_deleted_after_the_grace_period(tmp_path):
    """A warehouse from before the roll-ups' versions holds `rollups/<table>/part-0.parquet` and
    `rollups/stamp.json`, which nothing reads any more: an update deletes them once they are
    GRACE_SECONDS old, and leaves them while younger (an old process may still be reading them)."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    old_layout = [store.rollups_dir / "verdict" / "part-0.parquet", store.rollups_dir / "stamp.json"]
    for path in old_layout:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("stale")
    rollups.publish(store, Settings())
    assert all(path.exists() for path in old_layout)
    long_ago = time.time() - 2 * GRACE_SECONDS
    for path in [*old_layout, old_layout[0].parent]:
        os.utime(path, (long_ago, long_ago))
    rollups.publish(store, Settings())
    assert not any(path.exists() for path in old_layout) and not old_layout[0].parent.exists()
    assert store.published_rollups().is_dir() and (store.rollups_dir / "_schema" / "verdict" / "empty.parquet").is_file()


def test_reingest_is_identical_and_two_ingests_at_once_are_safe(tmp_path):
    warehouse = tmp_path / "warehouse"
    runs = {}
    for rank in (0, 1):
        folder = tmp_path / f"run{rank}"
        folder.mkdir()
        (folder / "trace.json.gz").write_bytes((SAMPLED / f"sampled_rank-{rank}.json.gz").read_bytes())
        runs[f"run{rank}"] = folder
    wirespeed("ingest", str(runs["run0"]), "--warehouse", str(warehouse), "--quiet")  # the warehouse exists first
    first = _table_rows(warehouse, "run0")
    both = [
        subprocess.Popen([sys.executable, "-m", "pipelines.commands.cli", "ingest", str(path), "--warehouse", str(warehouse), "--quiet"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for path in runs.values()
    ]
    for process in both:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    assert _table_rows(warehouse, "run0") == first
    assert _table_rows(warehouse, "run1")["ranks"]
    listed = json.loads(wirespeed("sql", "SELECT run_id FROM runs ORDER BY run_id", "--warehouse", str(warehouse), "--format", "json").stdout)
    assert listed == [{"run_id": "run0"}, {"run_id": "run1"}]


# --- hostile names --------------------------------------------------------------------------------------


def test_compressed_files_that_expand_like_a_bomb_are_read_no_further_and_named(tmp_path):
    """300 MB of whitespace packed into 0.3 MB, inside a valid trace and in an NCCL log, beside a
    real rank's trace: each bomb is read only as far as a real file's expansion allows (its first
    event is kept) and named with the reason; the real rank is read whole. (Before the bound, the
    trace alone held the ingest for minutes.)"""
    from isal import igzip

    run = tmp_path / "bombs"
    run.mkdir()
    (run / "rank1.json.gz").write_bytes((SAMPLED / "sampled_rank-1.json.gz").read_bytes())
    event = orjson.dumps(REAL_EVENTS[0])
    whitespace = b" " * (100 << 20)
    with igzip.open(run / "rank0.json.gz", "wb") as trace:
        trace.write(b'{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": [' + event + b",\n")
        for _ in range(3):
            trace.write(whitespace)
        trace.write(event + b"]}")
    line = b"host0:11:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    with igzip.open(run / "rank0.nccl.log.gz", "wb") as log:
        log.write(line)
        for _ in range(3):
            log.write(whitespace)
        log.write(line)
    assert max(p.stat().st_size for p in run.iterdir()) < 1 << 20
    warehouse = tmp_path / "warehouse"
    wirespeed("ingest", str(run), "--warehouse", str(warehouse), "--quiet")

    def rows(query):
        return json.loads(wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json").stdout)

    named = rows("SELECT file, reason FROM parse_issues WHERE reason LIKE '%expand to more than%' ORDER BY file")
    assert [Path(r["file"]).name for r in named] == ["rank0.json.gz", "rank0.nccl.log.gz"]
    assert all("compressed bytes expand to more than 200 times their size" in r["reason"] for r in named)
    kept = rows("SELECT rank, count(*) AS n FROM trace_events GROUP BY rank ORDER BY rank")
    assert kept[0] == {"rank": 0, "n": 1} and kept[1]["rank"] == 1 and kept[1]["n"] > 1000
    assert not rows("SELECT * FROM parse_issues WHERE file LIKE '%rank1.json.gz'")


@pytest.mark.parametrize("run_id", ["../../escaped", "a/b", "..", "it's \"quoted\"", "ünï código 🚀", "x'); DROP TABLE runs; --"])
def test_run_ids_cannot_escape_the_warehouse_or_reach_sql(tmp_path, run_id):
    outside = tmp_path / "outside"
    warehouse = outside / "inside" / "warehouse"
    source = tmp_path / "trace.json.gz"
    source.write_bytes((SAMPLED / "sampled_rank-0.json.gz").read_bytes())
    wirespeed("ingest", str(source), "--run-id", run_id, "--warehouse", str(warehouse), "--quiet")
    stray = [p for p in outside.rglob("*") if warehouse not in (p, *p.parents) and p != warehouse.parent]
    assert stray == []
    rows = json.loads(wirespeed("sql", "SELECT run_id FROM runs", "--warehouse", str(warehouse), "--format", "json").stdout)
    assert rows == [{"run_id": run_id}]
    report = wirespeed("report", run_id, "--warehouse", str(warehouse))
    assert Path(report.stdout.strip().splitlines()[-1]).resolve().is_relative_to(warehouse.resolve())


def test_file_names_with_quotes_spaces_and_unicode_ingest_and_are_named_exactly(tmp_path):
    """File names reach DuckDB as parameters, never as SQL: a name that is SQL is just a name."""
    run = tmp_path / "run \"quoted\" ünï"
    run.mkdir()
    good = "rank 0 it's'); DROP TABLE runs; -- 🚀.json.gz"
    bad = "rank 1 $(rm -rf ~) ü.json"
    (run / good).write_bytes((SAMPLED / "sampled_rank-0.json.gz").read_bytes())
    (run / bad).write_text("not a trace")
    inputs = digest(run)
    warehouse = tmp_path / "warehouse"
    wirespeed("ingest", str(run), "--run-id", "names", "--warehouse", str(warehouse), "--quiet")
    def rows(query):
        return json.loads(wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json").stdout)
    assert [Path(r["trace_file"]).name for r in rows("SELECT trace_file FROM ranks")] == [good]
    errors = rows("SELECT file, reason FROM parse_issues WHERE severity = 'error'")
    assert [Path(r["file"]).name for r in errors] == [bad]
    assert rows("SELECT run_id FROM runs") == [{"run_id": "names"}]
    assert digest(run) == inputs


def test_only_the_plain_unpickler_loads_pickles():
    """One module unpickles what a user hands over: pipelines/read/plain_pickle.py, whose unpickler
    refuses every global (test_flight_recorder ingests pickles that would run a command)."""
    pattern = re.compile(r"\b(import pickle|from pickle|pickle\.load|torch\.load|import dill|import shelve|marshal\.load)")
    offenders = [
        str(path.relative_to(REPO)) for folder in ("pipelines", "collectors") for path in (REPO / folder).rglob("*.py")
        if pattern.search(path.read_text())
    ]
    assert offenders == ["pipelines/read/plain_pickle.py"]


def test_a_pickle_that_stands_for_more_than_it_holds_is_refused_at_once():
    """Pickles of plain values that would hurt once read: one list named twice at each of 60 levels
    (2^60 strings written out, from 2 KB), a list that holds itself, and values JSON has not."""
    import pickle

    from pipelines.read import plain_pickle

    bomb: list = ["x" * 1000]
    for _ in range(60):
        bomb = [bomb, bomb]
    looped: list = []
    looped.append(looped)
    cases = {
        "stands for more than 64 times its size": {"entries": bomb},
        "holds a container that holds itself": {"entries": looped},
        "holds a bytes": {"entries": [b"\0"]},
        "holds a set": {"entries": [{1}]},
        "holds an integer past 64 bits": {"entries": [1 << 64]},
        "holds a key of type int": {"entries": {1: 2}},
    }
    started = time.monotonic()
    for reason, value in cases.items():
        data = pickle.dumps(value, protocol=4)
        with pytest.raises(plain_pickle.NotPlain, match=reason):
            plain_pickle.load(data)
    print(f"refused {len(cases)} pickles in {time.monotonic() - started:.3f} s")
    assert plain_pickle.load(pickle.dumps({"entries": [(1, None, "a")], "n": 1 << 62})) == {"entries": [[1, None, "a"]], "n": 1 << 62}
