"""The benchmark's own parts: generated trace sets are realistic, memory watching sees children,
and a small run of the whole benchmark prints its table. The timings themselves are not tested."""

from __future__ import annotations

import re
import subprocess
import sys

import duckdb

from conftest import REPO, ingest_directly

from pipelines.analysis.tables import analyze_run
from pipelines.settings import Settings
from pipelines.testbed.bench import synth, whole
from pipelines.testbed.bench.__main__ import _kept_every_rank
from pipelines.testbed.bench.measure import Measured, run_measured
from pipelines.testbed.bench.scale import count_device_events, scaled_version
from pipelines.warehouse.store import Warehouse

SOURCE = REPO / "examples" / "nccl_data.json.gz"


def test_tiled_trace_set_keeps_steps_launches_and_collectives_apart(tmp_path):
    meta, events = synth.load(SOURCE)
    one_tile = sum(len(synth._block(e)) + 2 for e in events)
    paths = synth.generate(SOURCE, tmp_path / "set", ranks=2, bytes_per_rank=3 * one_tile, ndjson_dir=tmp_path / "nd")
    assert [p.name for p in paths] == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    assert all(abs(p.stat().st_size - 3 * one_tile) < 0.1 * 3 * one_tile for p in paths)
    lines = (tmp_path / "nd" / "rank1.ndjson").read_bytes().count(b"\n")
    assert lines == 3 * len(events)
    # Each file names its own rank where HTA looks for it (`"rank":\s+`, as PyTorch writes it).
    for rank, path in enumerate(paths):
        head = path.read_bytes()[:200_000].decode()
        assert [int(found) for found in re.findall(r'"rank":\s+(\d+)', head)][:1] == [rank]

    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    run_id = ingest_directly(store, tmp_path / "set")
    con = store.connect()
    try:
        source_steps = con.execute("SELECT count(DISTINCT step) FROM steps WHERE run_id = $r", {"r": run_id}).fetchall()[0][0]
        per_rank = con.execute(
            "SELECT rank, count(*), count(DISTINCT step), min(step), max(step) FROM steps WHERE run_id = $r GROUP BY rank ORDER BY rank",
            {"r": run_id},
        ).fetchall()
        unlaunched = con.execute(
            "SELECT count(*) FROM collectives WHERE run_id = $r AND launched_ns IS NULL", {"r": run_id}
        ).fetchall()[0][0]
        matched = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE ranks = 2) FROM collective_sync WHERE run_id = $r", {"r": run_id}
        ).fetchall()[0]
    finally:
        con.close()
    # Every copy brings its own steps, numbered on from the last; both ranks have the same ones.
    assert source_steps % 3 == 0 and per_rank[0][1:] == per_rank[1][1:]
    assert per_rank[0][1] == per_rank[0][2] == per_rank[0][4] - per_rank[0][3] + 1
    # Launches still pair with their kernels, and each collective matches across the two ranks.
    assert unlaunched == 0
    assert matched[0] > 0 and matched[0] == matched[1]


def test_tiled_events_scale_the_analysis_input(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, SOURCE, "small")
    small = store.published("small")
    version = store.start_version("big", "bench", ())
    small_devices = count_device_events(small)
    tiles = scaled_version(small, version, 4 * small_devices)
    summary = analyze_run("big", version, store, Settings())
    con = store.connect()
    try:
        steps, collectives = con.execute(
            "SELECT (SELECT count(*) FROM steps WHERE run_id = 'small'), (SELECT count(*) FROM collectives WHERE run_id = 'small')"
        ).fetchall()[0]
    finally:
        con.close()
    assert small_devices > 0 and tiles == 4 and count_device_events(version) == 4 * small_devices
    # `ranks` counts the tiled events, as a parse of them would
    counted = duckdb.sql(f"SELECT sum(device_events) FROM read_parquet('{version}/ranks/*.parquet')").fetchall()[0][0]
    assert counted == 4 * small_devices
    assert summary.rows["steps"] == 4 * steps and summary.rows["collectives"] == 4 * collectives


def test_memory_of_worker_processes_is_counted(tmp_path):
    grandchild = "import time; b = bytearray(300 * 10**6); time.sleep(1.5)"
    child = (
        "import json, subprocess, sys, time; "
        f"subprocess.run([sys.executable, '-c', {grandchild!r}], check=True); "
        "print(json.dumps({'seconds': 1.0}))"
    )
    measured = run_measured([sys.executable, "-c", child])
    assert measured.failure is None and measured.seconds == 1.0
    assert measured.peak_bytes > 300 * 10**6


def test_a_load_that_kept_fewer_ranks_is_no_comparison():
    partial = _kept_every_rank(Measured(2.0, 10**9, {"seconds": 2.0, "ranks": 1}), ranks=8)
    assert partial.seconds is None and partial.failure == "kept 1 of 8 ranks"
    whole = Measured(2.0, 10**9, {"seconds": 2.0, "ranks": 8})
    assert _kept_every_rank(whole, ranks=8) is whole


def test_a_failing_method_is_reported_not_raised():
    measured = run_measured([sys.executable, "-c", "raise SystemExit('no parser here')"])
    assert measured.seconds is None and "no parser here" in measured.failure


def test_small_benchmark_prints_every_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.testbed.bench", "--sizes", "2x3", "--work", str(tmp_path), "--no-hta",
         "--device-events", "150000", "--rounds", "1", "--many-runs", "3", "--nccl-lines", "2000"],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    table = result.stdout
    for method in ("wirespeed ingest", "wirespeed ingest (.json.gz)", "orjson.loads", "DuckDB read_json, whole file",
                   "DuckDB read_json, NDJSON", "gunzip (zcat)", "wirespeed analysis SQL alone"):
        assert f"| {method}" in table, method
    wirespeed_rows = [line for line in table.splitlines() if line.startswith("| 2x3 | wirespeed")]
    assert len(wirespeed_rows) == 2 and not any("failed" in line for line in wirespeed_rows)
    assert ".json.gz takes" in table
    # The whole-process table: the example trace and the generated set, as a user runs them.
    whole_rows = [line for line in table.splitlines() if "| wirespeed ingest | " in line and line not in wirespeed_rows]
    assert len(whole_rows) >= 2 and not any("failed" in line for line in whole_rows)
    parser_rows = [line for line in table.splitlines() if f"| {whole.PARSER_ALONE} | " in line]
    assert len(parser_rows) >= 2 and not any("failed" in line for line in parser_rows)
    assert [row.split(" | ")[0] for row in parser_rows] == [row.split(" | ")[0] for row in whole_rows]  # one per input
    assert re.search(r"3 small runs in one `wirespeed ingest`: [\d.]+ s, [\d.]+ s per run", table)
    for command in ("wirespeed report RUN", "wirespeed report RUN, in the 3-run warehouse", "wirespeed sql (one small query)",
                    "wirespeed --help"):
        assert re.search(rf"\| {re.escape(command)} \| [\d.]+ \|", table), command
    for method in (whole.NCCL_INGEST, whole.POLARS_ALONE):
        assert re.search(rf"\| {re.escape(method)} \| [\d.]+ \| \d+ \| \d+ MB \|", table), method


def test_nccl_log_row_keeps_every_call(tmp_path, capsys):
    timed, calls, kept = whole.nccl_log(tmp_path, 4000, rounds=1, timeout_s=300)
    assert [t.method for t in timed if not t.failure] == [whole.NCCL_INGEST, whole.POLARS_ALONE]
    assert calls == 3960 and kept == calls  # 8 ranks' set-up lines, then calls
    whole.print_nccl_table(timed, calls, kept)
    assert "calls in the log: 3,960; in nccl_calls: 3,960" in capsys.readouterr().out
