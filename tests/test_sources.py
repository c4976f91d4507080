"""Finding a run's inputs by what its files are: every layout, and every file read or named."""

from __future__ import annotations

import gzip
import json
import os
import pickle  # to write pickles that discovery must recognise, never to read them
import shutil
from pathlib import Path

import pytest

from conftest import SHARED, TRACES, ingest_directly, table_rows
from pipelines.read.sources import discover
from pipelines.warehouse.store import Warehouse

LOGS = SHARED / "nccl_logs"
SAMPLED = TRACES / "hta_sampled_2rank"


def real_logs() -> list[Path]:
    return sorted(LOGS.glob("*.log"))


def place(target: Path, source: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)


def write(target: Path, text: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def accounted_for(path: Path) -> set[Path]:
    """The files of the run at `path` that ingest reads or names in parse_issues, or that are the
    collector's own (manifest, markers, the ranks' and hosts' files the manifest is made from)."""
    source = discover(path)
    found = set(source.trace_files + source.nccl_log_files + source.net_sample_files + source.cpu_sample_files
                + source.fr_dump_files)
    named = {Path(issue.file) for issue in source.issues}
    own = {p for p in path.rglob("*") if p.is_file() and (p.relative_to(path).parts[0] in ("ranks", "hosts") or p.name in ("manifest.json", "_DONE"))}
    return found | named | own


def every_file(path: Path) -> set[Path]:
    """Every file under `path`, but not inside a subfolder that is a run folder of its own."""
    runs = [p.parent for p in path.rglob("manifest.json") if p.parent != path]
    return {p for p in path.rglob("*") if p.is_file() and not any(run in p.parents for run in runs)}


@pytest.fixture
def collector_folder(tmp_path) -> Path:
    run = tmp_path / "run"
    place(run / "traces" / "rank0.pt.trace.json.gz", SAMPLED / "sampled_rank-0.json.gz")
    place(run / "traces" / "rank1.pt.trace.json.gz", SAMPLED / "sampled_rank-1.json.gz")
    place(run / "nccl" / "nccl.host.1.log", real_logs()[0])
    write(run / "samples" / "net.host.csv", "t_ns,interface,rx_bytes,tx_bytes\n")
    write(run / "samples" / "cpu.host.csv", "t_ns,busy\n")
    for rank in (0, 1):
        write(run / "ranks" / f"rank{rank}.json", json.dumps({"rank": rank, "host": "host"}))
    write(run / "hosts" / "host.json", "{}")
    write(run / "hosts" / ".finishing", "")
    write(run / "manifest.json", json.dumps({"run_id": "run", "world_size": 2}))
    write(run / "_DONE", "1\n")
    return run


def test_a_collector_folder_is_read_whole(collector_folder):
    source = discover(collector_folder)
    assert source.kind == "collector" and source.manifest["world_size"] == 2
    assert [p.name for p in source.trace_files] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert [p.name for p in source.nccl_log_files] == ["nccl.host.1.log"]
    assert [p.name for p in source.net_sample_files + source.cpu_sample_files] == ["net.host.csv", "cpu.host.csv"]
    assert source.issues == []
    assert accounted_for(collector_folder) == every_file(collector_folder)


def test_a_run_that_died_before_its_manifest_is_described_by_its_ranks_files(tmp_path):
    """No manifest.json and no _DONE: the ranks' own files still give the line rate and hosts."""
    run = tmp_path / "died"
    place(run / "traces" / "rank0.pt.trace.json.gz", SAMPLED / "sampled_rank-0.json.gz")
    write(run / "ranks" / "rank0.json", json.dumps({"rank": 0, "host": "node-a", "world_size": 2, "link_gbps": 25.0,
                                                    "link_source": "sysfs", "backend": "nccl"}))
    source = discover(run)
    assert source.kind == "collector"
    assert (source.manifest["link_gbps"], source.manifest["hosts"], source.manifest["world_size"]) == (25.0, ["node-a"], 2)
    assert [i.reason for i in source.issues] == [
        "the run folder has no manifest.json (did the run finish?): its ranks/ and hosts/ files were read instead"
    ]
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, run)
    assert table_rows(store, "SELECT link_gbps, link_source, backend FROM runs") == [
        {"link_gbps": 25.0, "link_source": "sysfs", "backend": "nccl"}
    ]


def test_logs_in_a_collector_subfolder_are_read_as_logs_given_bare(tmp_path):
    """The issue's case: a run folder with logs under nccl/ and nothing else (the job died before
    the profiler wrote anything) yields every call and communicator the same logs give bare."""
    bare, nested = tmp_path / "bare", tmp_path / "died" / "nccl"
    for log in real_logs():
        place(bare / log.name, log)
        place(nested / log.name, log)
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, bare)
    ingest_directly(store, nested.parent)
    counts = table_rows(store, "SELECT run_id, (SELECT count(*) FROM nccl_calls c WHERE c.run_id = r.run_id) AS calls, "
                               "(SELECT count(*) FROM nccl_comms c WHERE c.run_id = r.run_id) AS comms FROM runs r ORDER BY run_id")
    assert counts[0]["calls"] > 0 and counts[0]["comms"] > 0
    assert [(c["calls"], c["comms"]) for c in counts] == [(counts[0]["calls"], counts[0]["comms"])] * 2
    assert discover(nested.parent).kind == "collector"


def test_bare_traces_and_what_is_not_an_input(tmp_path):
    folder = tmp_path / "traces"
    place(folder / "rank0.json.gz", SAMPLED / "sampled_rank-0.json.gz")
    write(folder / "README.md", "how these traces were taken\n")
    (folder / ".DS_Store").write_bytes(b"\0\1")
    source = discover(folder)
    assert source.kind == "trace folder" and [p.name for p in source.trace_files] == ["rank0.json.gz"]
    assert {(Path(i.file).name, i.severity, i.reason) for i in source.issues} == {
        ("README.md", "info", "not read: neither a trace, an NCCL log, a Flight Recorder dump, a counter sample nor a manifest"),
        (".DS_Store", "info", "not read: a hidden file"),
    }
    assert accounted_for(folder) == every_file(folder)


def test_logs_are_known_by_their_lines_whatever_their_name(tmp_path):
    """A job's stdout saved without a suffix holds NCCL lines; a binary of another name does not."""
    folder = tmp_path / "logs"
    place(folder / "stdout", real_logs()[0])
    (folder / "model.bin").write_bytes(os.urandom(4096))
    write(folder / "empty.log", "nothing from NCCL here\n")
    source = discover(folder)
    assert source.kind == "log folder" and [p.name for p in source.nccl_log_files] == ["empty.log", "stdout"]
    assert [(Path(i.file).name, i.severity) for i in source.issues] == [("model.bin", "info")]
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, folder)
    named = table_rows(store, "SELECT file, severity, reason FROM parse_issues WHERE severity = 'info' ORDER BY file")
    assert [(Path(r["file"]).name, r["reason"]) for r in named] == [
        ("empty.log", "read as an NCCL log, but no line in it is one wirespeed reads"),
        ("model.bin", "not read: neither a trace, an NCCL log, a Flight Recorder dump, a counter sample nor a manifest"),
    ]


def test_flight_recorder_dumps_are_known_by_their_first_bytes(tmp_path):
    """Dumps under any name, JSON or pickle, are read; any other pickle is named; a trace that
    mentions the recorder's groups stays a trace."""
    folder = tmp_path / "run"
    dump = {"comm_lib_version": "", "entries": [{"collective_seq_id": 1, "profiling_name": "gloo:all_reduce"}],
            "pg_config": {}, "pg_status": {}, "version": "2.10"}
    write(folder / "fr" / "rank0.json", json.dumps(dump))
    write(folder / "nccl_trace_rank_1", json.dumps(dump))
    (folder / "nccl_trace_rank_2").write_bytes(pickle.dumps(dump, protocol=2))
    (folder / "weights.pkl").write_bytes(pickle.dumps([1.0, 2.0]))
    place(folder / "rank0.json.gz", SAMPLED / "sampled_rank-0.json.gz")
    source = discover(folder)
    assert [p.name for p in source.fr_dump_files] == ["nccl_trace_rank_1", "nccl_trace_rank_2", "rank0.json"]  # in path order
    assert [p.name for p in source.trace_files] == ["rank0.json.gz"]
    assert [(Path(i.file).name, i.reason) for i in source.issues] == [
        ("weights.pkl", "not read: a pickle that is not a Flight Recorder dump (wirespeed loads no other)"),
    ]
    assert accounted_for(folder) == every_file(folder)


def test_a_compressed_log_reads_as_the_plain_one(tmp_path):
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    log = next(p for p in real_logs() if "coll" in p.name)
    place(plain / log.name, log)
    packed.mkdir()
    (packed / f"{log.name}.gz").write_bytes(gzip.compress(log.read_bytes()))
    assert [p.name for p in discover(packed).nccl_log_files] == [f"{log.name}.gz"]
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    for folder in (plain, packed):
        ingest_directly(store, folder)
    calls = table_rows(store, "SELECT run_id, count(*) AS calls FROM nccl_calls GROUP BY run_id ORDER BY run_id")
    assert [c["run_id"] for c in calls] == ["packed", "plain"] and calls[0]["calls"] == calls[1]["calls"] > 0


def test_mixed_and_nested_one_level(tmp_path):
    """Traces and logs copied from two nodes, a folder each, beside a trace at the top."""
    folder = tmp_path / "copied"
    place(folder / "rank0.json.gz", SAMPLED / "sampled_rank-0.json.gz")
    place(folder / "node1" / "rank1.json.gz", SAMPLED / "sampled_rank-1.json.gz")
    place(folder / "node1" / "nccl.out", real_logs()[1])
    place(folder / "node0" / "nccl.log", real_logs()[0])
    write(folder / "node0" / "notes", "restarted twice\n")
    source = discover(folder)
    assert source.kind == "trace folder"
    assert [p.relative_to(folder).as_posix() for p in source.trace_files] == ["rank0.json.gz", "node1/rank1.json.gz"]
    assert [p.relative_to(folder).as_posix() for p in source.nccl_log_files] == ["node0/nccl.log", "node1/nccl.out"]
    assert [Path(i.file).relative_to(folder).as_posix() for i in source.issues] == ["node0/notes"]
    assert accounted_for(folder) == every_file(folder)


def test_a_run_folder_inside_a_run_is_named_not_merged(tmp_path, collector_folder):
    outer = tmp_path / "outer"
    place(outer / "rank0.json.gz", SAMPLED / "sampled_rank-0.json.gz")
    shutil.copytree(collector_folder, outer / "other-run")
    source = discover(outer)
    assert [p.name for p in source.trace_files] == ["rank0.json.gz"] and source.nccl_log_files == []
    assert [(Path(i.file).name, i.severity) for i in source.issues] == [("other-run", "warning")]
    assert "ingest it as a run" in source.issues[0].reason
