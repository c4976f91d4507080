"""NCCL debug logs: every real log parses to the values read off it by hand; runs join logs and traces."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import SHARED, ingest_directly, table_rows, wirespeed
from pipelines.read.nccl.logfile import read_log
from pipelines.warehouse import sql
from pipelines.warehouse.store import Warehouse
from synthetic import NcclLog

LOGS = SHARED / "nccl_logs"


def counts(name: str) -> dict:
    rows = read_log(LOGS / name, "r")
    return {
        "comms": len(rows.comms), "connections": len(rows.connections), "calls": len(rows.calls),
        "messages": len(rows.messages), "tests": len(rows.tests), "issues": len(rows.issues),
    }


# Read off each excerpt by hand. Every one ends mid-line (the cut is one issue); connection lines
# whose communicator the excerpt does not show are a second, warning, issue per process.
EXPECTED = {
    "dgxspark-playbooks-103-nccltests-2.20.0-gb10-2node-table.log": dict(comms=0, connections=0, calls=0, messages=0, tests=8, issues=1),
    "nccl-1193-2.14.3-l4-128rank-fastsocket-coll-a.log": dict(comms=0, connections=0, calls=4, messages=0, tests=0, issues=1),
    "nccl-1453-2.2x-h100-2node-ibext-gdrdma-channels.log": dict(comms=0, connections=12, calls=0, messages=0, tests=0, issues=2),
    "nccl-1646-2.25.1-b200-init-timings.log": dict(comms=1, connections=3, calls=0, messages=0, tests=0, issues=3),
    "nccl-1730-2.26.2-ras-status-256rank-watchdog.log": dict(comms=0, connections=0, calls=0, messages=2, tests=0, issues=1),
    "nccl-1765-profiler-plugin-example-trace.log": dict(comms=0, connections=0, calls=1, messages=0, tests=0, issues=1),
    "nccl-203-tf-2.4.2-roce-init.log": dict(comms=2, connections=2, calls=0, messages=0, tests=0, issues=1),
    "nccl-207-2.3.7-2node-socket-init.log": dict(comms=1, connections=0, calls=0, messages=0, tests=0, issues=1),
    "nccl-584-2.7-sendrecv-coll.log": dict(comms=0, connections=0, calls=7, messages=0, tests=0, issues=1),
    "nccl-697-2.12.10-dgxa100-socket-systemerror.log": dict(comms=0, connections=13, calls=0, messages=2, tests=0, issues=2),
    "nccl-957-2.18.3-openmpi-timestamp-tag-warn.log": dict(comms=0, connections=0, calls=0, messages=5, tests=0, issues=1),
    "nccl-tests-232-h100-2node-tree-allreduce.log": dict(comms=0, connections=0, calls=0, messages=0, tests=10, issues=1),
    "torchtitan-1369-h100-tp2-coll-a.log": dict(comms=0, connections=0, calls=2, messages=0, tests=0, issues=1),
}


def test_every_shared_log_is_covered():
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_log_yields_what_it_holds(name):
    assert counts(name) == EXPECTED[name]
    cut = [i for i in read_log(LOGS / name, "r").issues if "ends in the middle" in i.reason]
    assert len(cut) == 1 and cut[0].line == len((LOGS / name).read_text().split("\n")) and cut[0].severity == "error"


def test_coll_lines():
    calls = read_log(LOGS / "nccl-1193-2.14.3-l4-128rank-fastsocket-coll-a.log", "r").calls
    first = calls[0]
    assert (first["host"], first["pid"], first["device"]) == ("r24-02-22-23-29-0066-raycluster-lv52c-worker-l4-8-fqztx", 615, 2)
    assert (first["op"], first["op_count"], first["count"], first["dtype"], first["bytes"], first["nranks"]) == (
        "allreduce", 0x139D, 7_382_228, "float32", 29_528_912, 128)
    assert first["reduce_op"] == "sum" and first["comm"] == "0x78cfda045840"
    # ReduceScatter and AllGather counts are per rank: the message is count x 4 bytes x 2 ranks.
    titan = read_log(LOGS / "torchtitan-1369-h100-tp2-coll-a.log", "r").calls
    assert [(c["op"], c["bytes"], c["message_bytes"]) for c in titan] == [
        ("reducescatter", 8_388_608, 16_777_216), ("allgather", 8_388_608, 16_777_216)]


def test_send_recv_order_and_peers():
    calls = read_log(LOGS / "nccl-584-2.7-sendrecv-coll.log", "r").calls
    # root is the peer; seq counts calls per communicator in log order, whatever opCount says.
    by_comm = [(c["comm"], c["op"], c["seq"], c["root"], c["op_count"]) for c in calls]
    assert by_comm[:4] == [("0x7f5128002e10", "send", i, 1, 0x12 + 2 * i) for i in range(4)]
    assert by_comm[4:6] == [("0x7f516c002e10", "send", 0, 0, 0xD60), ("0x7f516c002e10", "send", 1, 0, 0xD62)]
    assert by_comm[6] == ("0x7f5128002e10", "recv", 4, 1, 0xD60)


def test_communicators_across_versions():
    b200 = read_log(LOGS / "nccl-1646-2.25.1-b200-init-timings.log", "r").comms[0]
    assert (b200["comm_id"], b200["comm_id_source"], b200["rank"], b200["nranks"], b200["bus_id"], b200["init_api"]) == (
        "0x2fb902677fd5202e", "commId", 0, 8, "18000", "ncclCommInitRankConfig")
    assert b200["init_seconds"] == 55.17
    # NCCL 2.4, one TensorFlow process driving two GPUs: one communicator seen from both devices.
    tf = read_log(LOGS / "nccl-203-tf-2.4.2-roce-init.log", "r")
    assert [(c["rank"], c["device"], c["comm_id"], c["nccl_version"], c["network"]) for c in tf.comms] == [
        (0, 1, "derived:2-ranks-#0", "2.4.2", "IB"), (1, 0, "derived:2-ranks-#0", "2.4.2", "IB")]
    assert [(c["from_rank"], c["to_rank"], c["transport"], c["detail"], c["comm"]) for c in tf.connections] == [
        (0, 1, "P2P", "P2P/direct pointer", "0x7ef9d4137620"), (1, 0, "P2P", "P2P/direct pointer", "0x7ef9d414a840")]
    old = read_log(LOGS / "nccl-207-2.3.7-2node-socket-init.log", "r").comms[0]
    assert (old["rank"], old["nranks"], old["nccl_version"], old["network"]) == (1, 8, "2.3.7", "Socket")


def test_connections_over_the_network():
    links = read_log(LOGS / "nccl-1453-2.2x-h100-2node-ibext-gdrdma-channels.log", "r").connections
    assert {(c["from_rank"], c["to_rank"], c["direction"], c["transport"], c["detail"]) for c in links} == {
        (0, 8, "send", "NET", "NET/IBext_v8/7/GDRDMA"), (8, 0, "receive", "NET", "NET/IBext_v8/7/GDRDMA")}
    assert sorted({c["channel"] for c in links}) == [1, 3, 5, 7, 9, 11, 13, 15]


def test_problems_in_time_order_with_classes():
    messages = read_log(LOGS / "nccl-957-2.18.3-openmpi-timestamp-tag-warn.log", "r").messages
    assert [m["class"] for m in messages] == ["cuda error", "connection failure", "connection failure", "connection failure", "cuda error"]
    assert messages[0]["where"] == "transport.cc:154" and messages[0]["host"] == "tomte401"
    assert messages[0]["logged_at_ns"] == 1_691_757_105 * 10**9  # Fri Aug 11 12:31:45 2023, from OpenMPI's prefix
    chain = read_log(LOGS / "nccl-697-2.12.10-dgxa100-socket-systemerror.log", "r").messages
    assert [(m["class"], m["message"]) for m in chain] == [
        ("system error", "include/net.h:25 -> 2"), ("system error", "transport/net.cc:515 -> 2")]
    watchdog = read_log(LOGS / "nccl-1730-2.26.2-ras-status-256rank-watchdog.log", "r").messages
    assert [(m["class"], m["rank"]) for m in watchdog] == [("timeout", 118), ("timeout", 118)]


def test_nccl_tests_tables_old_and_new():
    new = read_log(LOGS / "dgxspark-playbooks-103-nccltests-2.20.0-gb10-2node-table.log", "r").tests
    first = new[0]
    assert (first["test"], first["hosts"], first["size_bytes"], first["count"], first["placement"], first["time_ns"]) == (
        "all_reduce_perf", "spark-d708,spark-dbf4", 8192, 2048, "out-of-place", 35_150)
    assert first["busbw_gbytes_per_s"] == 0.23 and first["busbw_gbps"] == pytest.approx(1.84)
    h100 = read_log(LOGS / "nccl-tests-232-h100-2node-tree-allreduce.log", "r").tests
    assert [(t["size_bytes"], t["placement"], t["busbw_gbytes_per_s"]) for t in h100[-2:]] == [
        (33_554_432, "out-of-place", 41.31), (33_554_432, "in-place", 41.52)]
    assert h100[0]["test"] == "all_reduce_perf" and h100[0]["root"] == -1 and h100[0]["wrong"] == "0"


def test_profiler_plugin_records():
    (call,) = read_log(LOGS / "nccl-1765-profiler-plugin-example-trace.log", "r").calls
    assert (call["source"], call["op"], call["count"], call["dtype"], call["bytes"], call["rank"], call["seq"]) == (
        "profiler plugin", "allreduce", 2_097_152, "float32", 8_388_608, 0, 0)
    assert call["comm_id"] == f"0x{6479621443159067765:016x}"


def test_damaged_lines_are_reported_and_the_rest_kept(tmp_path):
    good = "host:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0xa [nranks=2] stream 0x2"
    garbled = "host:1:1 [0] NCCL INFO AllReduce: opCount zz sendbuff"
    other = "host:2:2 [0] NCCL INFO AllGather: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 datatype 9 op 0 root 0 comm 0xb [nranks=2] stream 0x2"
    log = tmp_path / "mixed.log"
    log.write_bytes("\n".join([good, garbled, other, good]).encode() + b"\n\x00\x01\x02\xff\xfe binary\n" + good.encode() + b"\n")
    rows = read_log(log, "r")
    assert [(c["pid"], c["op"], c["seq"]) for c in rows.calls] == [(1, "allreduce", 0), (2, "allgather", 0), (1, "allreduce", 1), (1, "allreduce", 2)]
    assert [(i.line, i.severity) for i in rows.issues if "garbled" in i.reason or "binary" in i.reason] == [(2, "error"), (5, "error")]


def test_logs_alone_ingest_and_report(tmp_path):
    warehouse = tmp_path / "warehouse"
    single = wirespeed("ingest", str(LOGS / "nccl-957-2.18.3-openmpi-timestamp-tag-warn.log"), "--warehouse", str(warehouse), "--quiet")
    assert "no traces" in single.stdout
    wirespeed("ingest", str(LOGS), "--warehouse", str(warehouse), "--quiet")
    query = lambda q: json.loads(wirespeed("sql", q, "--warehouse", str(warehouse), "--format", "json").stdout)  # noqa: E731
    assert query("SELECT run_id, source_kind FROM runs ORDER BY run_id") == [
        {"run_id": "nccl-957-2.18.3-openmpi-timestamp-tag-warn", "source_kind": "log file"},
        {"run_id": "nccl_logs", "source_kind": "log folder"},
    ]
    totals = query("SELECT (SELECT count(*) FROM nccl_calls WHERE run_id = 'nccl_logs') AS calls, "
                   "(SELECT count(*) FROM nccl_tests_results WHERE run_id = 'nccl_logs') AS tests, "
                   "(SELECT count(*) FROM parse_issues WHERE run_id = 'nccl_logs') AS issues")[0]
    assert totals == {"calls": 14, "tests": 18, "issues": 19}  # README.md and SOURCES.tsv named, not read
    html = (warehouse / "reports" / "nccl_logs.html").read_text()
    assert "only logs" in html and "Who talks to whom" in html and "nccl-tests" in html


# --- a run with traces and logs ------------------------------------------------------------------


def write_logs(run_dir, ranks: list[dict], collectives: list[dict], comm_id: str, wrong_rank: int):
    """NCCL logs for each rank's process: its communicator, its link, its COLL lines.

    Ranks 0-1 and 2-3 pretend to share hosts: their links are P2P within a pair and NET across.
    Each process logs 12 calls before the profiled ones (two unprofiled steps of six buckets).
    """
    n = len(ranks)
    for rank in ranks:
        r = rank["rank"]
        log = NcclLog(rank["host"], rank["pid"], rank["pid"] + 7)
        peer = (r + 1) % n
        via = "via P2P/CUMEM" if r // 2 == peer // 2 else "[send] via NET/IBext_v8/0/GDRDMA"
        log.communicator("0x55aa", r, n, comm_id, [f"{r}[0] -> {peer}[0] {via}"])
        mine = [c for c in collectives if c["rank"] == r]
        sizes = [c["bytes"] for c in mine[:6]] * 2 + [c["bytes"] for c in mine]
        for position, size in enumerate(sizes):
            log.all_reduce("0x55aa", n, position, size + (4 if r == wrong_rank and position == 12 + 3 else 0))
        log.write(run_dir)


def test_traces_and_logs_join(gloo_run, tmp_path):
    plain = Warehouse(tmp_path / "plain")
    plain.ensure()
    ingest_directly(plain, gloo_run)
    ranks = table_rows(plain, "SELECT rank, host, pid FROM ranks ORDER BY rank")
    collectives = table_rows(plain, "SELECT rank, bytes, start_ns FROM collectives ORDER BY rank, start_ns")
    assert table_rows(plain, "SELECT DISTINCT scope, scope_source, transport FROM collectives") == [
        {"scope": "intra", "scope_source": "hosts", "transport": None}
    ]
    run_dir = tmp_path / "run"
    shutil.copytree(gloo_run, run_dir)
    write_logs(run_dir, ranks, collectives, "0x1234abcd5678ef00", wrong_rank=0)
    store = Warehouse(tmp_path / "joined")
    store.ensure()
    ingest_directly(store, run_dir)
    con = store.connect()
    try:
        joined = con.execute("SELECT DISTINCT comm_id, scope, scope_source, transport FROM collectives").fetchall()
        assert joined == [("0x1234abcd5678ef00", "inter", "nccl connections", "NET/IBext_v8, P2P")]
        assert con.execute("SELECT DISTINCT scope FROM collective_bw").fetchall() == [("inter",)]
    finally:
        con.close()
    checks = table_rows(store, "SELECT * FROM nccl_crosscheck ORDER BY rank")
    profiled = len(collectives) // len(ranks)
    assert [c["rank"] for c in checks] == [r["rank"] for r in ranks]
    for check in checks:
        assert (check["trace_collectives"], check["log_calls"], check["offset_calls"]) == (profiled, profiled + 12, 12)
        expected_wrong = 1 if check["rank"] == 0 else 0
        assert (check["size_mismatches"], check["matched"], check["op_mismatches"], check["missing_in_log"]) == (
            expected_wrong, profiled - expected_wrong, 0, 0)
    assert "trace collective #3" in checks[0]["first_mismatch"] and checks[1]["first_mismatch"] is None


def test_collector_sets_nccl_logging_up_as_documented():
    from collectors.launch import NCCL_ENV

    assert NCCL_ENV["NCCL_DEBUG"] == "INFO" and {"INIT", "COLL"} <= set(NCCL_ENV["NCCL_DEBUG_SUBSYS"].split(","))
    assert sql.table("nccl_calls").grain.startswith("one row per run, process")


# --- the streaming pass reads call lines as the per-line grammar does ----------------------------

CALL = "AllReduce: opCount {n:x} sendbuff 0x1 recvbuff 0x2 count {count} datatype {dt} op {op} root 0 comm {comm} [nranks={nranks}] stream 0x3"


def mixed_log_lines() -> list[str]:
    """Call lines of every shape the grammar reads, interleaved with the lines that give their
    communicators, some that polars takes and some it must leave to the per-line reader."""
    a = "nodeA:11:11 [0] NCCL INFO"
    b = "nodeB:22:23 [1] NCCL INFO"
    return [
        f"{a} " + CALL.format(n=0, count=4, dt=7, op=0, comm="0xa", nranks=2),  # before any Init
        f"{a} NCCL version 2.14.3+cuda11.8",
        f"{a} comm 0xa rank 0 nranks 2 cudaDev 0 busId 1000 - Init START",
        f"{a} Channel 00 : 0[1000] -> 1[2000] via P2P/IPC",
        f"{a} " + CALL.format(n=1, count=8, dt=9, op=2, comm="0xa", nranks=0),  # nranks 0: the communicator's
        f"{a} comm 0xa rank 0 nranks 2 cudaDev 0 busId 1000 commId 0x5eed - Init COMPLETE",  # now by commId
        f"[2025-03-01 12:00:00.123456] {a} " + CALL.format(n=2, count=16, dt=12, op=7, comm="0xa", nranks=2),
        f"[2025-03-01_23:59:60] {a} " + CALL.format(n=3, count=1, dt=7, op=0, comm="0xa", nranks=2),  # leap second
        f"[0000-01-01 00:00:00] {a} " + CALL.format(n=4, count=1, dt=7, op=0, comm="0xa", nranks=2),
        f"Fri Aug 11 12:31:45 2023[1,0]<stdout>:{b} " + CALL.format(n=0, count=2, dt=4, op=0, comm="0xb", nranks=4),
        f"{b} [Rank 5] " + CALL.format(n=1, count=2, dt=4, op=0, comm="0xb", nranks=4),
        "nodeB:22:23 [1] 12.5 enqueue.cc:88 NCCL TRACE " + CALL.format(n=2, count=2, dt=4, op=0, comm="0xb", nranks=4),
        "nodeB:22:23 [1] NCCL WARN " + CALL.format(n=3, count=2, dt=4, op=0, comm="0xb", nranks=4),  # a warning
        "n\u00f6de:33:33 [0] NCCL INFO " + CALL.format(n=0, count=3, dt=7, op=0, comm="(nil)", nranks=2),
        f"{a} " + CALL.format(n=5, count=3, dt=7, op=0, comm="0xa", nranks=2).replace("0x1", "0x1\x00"),  # binary
        f"x\tNCCL note {a} " + CALL.format(n=5, count=3, dt=7, op=0, comm="0xa", nranks=2),
        f"{a} see {a} " + CALL.format(n=5, count=3, dt=7, op=0, comm="0xa", nranks=2),  # an INFO line about a call
        f"{a} " + CALL.format(n=5, count=3, dt=7, op=0, comm="0xa", nranks=2) + "\r",
        f"{a} " + CALL.format(n=6, count=3, dt=7, op=0, comm="0xa", nranks=2).replace("AllReduce", "AllGather") + "   ",
        f"{a} " + CALL.format(n=7, count=99999999999999999999, dt=7, op=0, comm="0xa", nranks=2)[:60],  # garbled
        "",
        "   ",
        f"{b} " + CALL.format(n=4, count=2, dt=4, op=0, comm="0xb", nranks=4),
    ]


def read_line_by_line(path, run_id: str) -> list[dict]:
    """The calls of a plain log as the per-line grammar alone reads them (every line through
    logfile's reader, none through polars' streaming pass), numbered and named as the table is."""
    import polars as pl

    from pipelines.read.nccl import calls
    from pipelines.read.nccl.logfile import _Reader

    reader = _Reader(path, run_id, 0)
    text = path.read_bytes().decode("utf-8", errors="replace")
    numbered = text.split("\n")
    cut = not text.endswith("\n")
    for number, raw in enumerate(numbered[:-1] if not cut else numbered, start=1):
        line = raw.rstrip("\r")
        if line.strip() and not (cut and number == len(numbered)):
            reader.read_line(number, line)
    rows = reader.finish()
    return pl.concat([pl.DataFrame(schema=calls.schema()), *calls.frames([rows])]).sort("line").to_dicts()


def test_streaming_pass_reads_calls_as_the_line_grammar_does(tmp_path, monkeypatch):
    from pipelines.read.nccl import calls, lines
    from pipelines.read.nccl.logfile import scan_log

    monkeypatch.setattr(lines, "PER_LINE_BYTES", 0)  # polars reads even a log this small
    log = tmp_path / "mixed.log"
    body = mixed_log_lines()
    log.write_text("\n".join(body * 3 + body[:1]))  # cut in the middle of its last line
    streamed = read_log(log, "r")
    assert streamed.calls == read_line_by_line(log, "r")
    monkeypatch.setattr(calls, "BATCH_ROWS", 3)  # seq carried across batches, the reader's calls merged in
    monkeypatch.setattr(lines, "SEGMENT_BYTES", 700)  # lines numbered on across segments
    segmented = read_log(log, "r")
    assert segmented.calls == streamed.calls and segmented.issues == streamed.issues
    # Both readers had their share, and the communicator's identity changed between its calls.
    scanned = scan_log(log, "r", tmp_path / "work")
    assert len(scanned.call_lines) >= 15 and scanned.parsed - len(scanned.call_lines) >= 15
    first = [(c["comm_id"], c["nranks"], c["logged_at_ns"]) for c in streamed.calls[:4]]
    assert first == [(None, 2, None), ("derived:2-ranks-#0", 2, None), ("0x5eed", 2, 1_740_830_400_123_456_000), ("0x5eed", 2, None)]
    assert [(c["seq"], c["dtype"], c["reduce_op"]) for c in streamed.calls[:3]] == [(0, "float32", "sum"), (1, "bfloat16", "max"), (2, "code 12", "code 7")]
    assert [i.line for i in streamed.issues if "ends in the middle" in i.reason] == [3 * len(body) + 1]


@pytest.mark.parametrize("segment_bytes", [64 << 20, 500])
def test_gzip_members_and_invalid_utf8(tmp_path, monkeypatch, segment_bytes):
    import gzip

    from pipelines.read.nccl import lines

    monkeypatch.setattr(lines, "SEGMENT_BYTES", segment_bytes)
    monkeypatch.setattr(lines, "PER_LINE_BYTES", 0)

    plain = tmp_path / "plain.log"
    body = mixed_log_lines()
    plain.write_bytes("\n".join(body).encode() + b"\n\xff\xfe not text\n" + "\n".join(body).encode() + b"\n")
    packed = tmp_path / "packed.log.gz"
    half = len(body) // 2
    packed.write_bytes(gzip.compress(("\n".join(body[:half]) + "\n").encode())
                       + gzip.compress(("\n".join(body[half:]) + "\n").encode() + b"\xff\xfe not text\n" + "\n".join(body).encode() + b"\n"))
    expected = read_line_by_line(plain, "r")
    for path in (plain, packed):
        rows = read_log(path, "r")
        assert [{**c, "log_file": None} for c in rows.calls] == [{**c, "log_file": None} for c in expected]
        assert [i.reason for i in rows.issues if i.line is None] == ["invalid UTF-8 was replaced by U+FFFD"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_logs_read_the_same_both_ways(name, monkeypatch):
    from pipelines.read.nccl import lines

    monkeypatch.setattr(lines, "PER_LINE_BYTES", 0)
    streamed = read_log(LOGS / name, "r")
    assert streamed.calls == read_line_by_line(LOGS / name, "r")
    monkeypatch.setattr(lines, "PER_LINE_BYTES", 1 << 20)  # a small log read line by line gives the same
    by_line = read_log(LOGS / name, "r")
    assert (by_line.calls, by_line.comms, by_line.connections, by_line.messages, by_line.tests, by_line.issues) == (
        streamed.calls, streamed.comms, streamed.connections, streamed.messages, streamed.tests, streamed.issues)
