"""Read one NCCL log file into rows of the nccl_* tables.

A log may hold NCCL debug lines of one process (NCCL_DEBUG_FILE) or of many (a job's stdout),
nccl-tests result tables, NCCL profiler-plugin records, PyTorch watchdog lines and anything else a
job prints. Every whole line that can be parsed is parsed; a line cut off at the end of the file,
a garbled NCCL line or binary garbage becomes a ParseIssue naming the file and line, and reading
goes on. The call lines, nearly all of a large log, are read by polars' streaming engine
(lines.py) into Parquet; this module reads every other line, in order, and calls.py joins the
calls to the communicators as they stood at each call's line.

Three things need state across lines:
- communicators: COLL lines name a per-process `comm` pointer; the Init lines map it to the
  communicator's cross-rank id (`commId`, NCCL 2.16+) and the rank. Without a commId, the k-th
  communicator of n ranks created for a device is taken to be the k-th one of n ranks on every
  other device (PyTorch creates its process groups in the same order everywhere).
- connections: `Channel`/`Ring` lines do not name their communicator. They are printed while one
  is being set up on that process and device: after its `Init START` (2.18+) or its first `comm`
  line (2.3, 2.4), or before its `Init COMPLETE` (2.5 to 2.17).
- call order: a communicator's COLL lines are printed in call order, so their order in the file is
  the order of the calls; `opCount` means different things across versions (per call, stuck at 0
  in 2.8, per group launch from 2.9) and is kept only as written.
"""

from __future__ import annotations

import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import polars as pl

from pipelines.read.issues import ParseIssue
from pipelines.read.nccl import calls, grammar, lines

RING_ORDER = re.compile(r"^(?:Channel|Ring) \d+(?:/\d+)? :(?:\s+\d+)+$")
TEST_HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
TEST_NAME = re.compile(r"(?:Collective test starting: |\./)(\w+_perf)\b")
TEST_DEVICE = re.compile(r"^#\s+Rank\s+(\d+)(?: Group\s+\d+)? Pid\s+\d+ on\s+(\S+) device")
COLLECTIVE_NAMES = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter", "broadcast": "broadcast",
    "reduce": "reduce", "send": "send", "recv": "recv", "alltoall": "alltoall", "gather": "gather", "scatter": "scatter",
}


@dataclass
class LogRows:
    comms: list[dict] = field(default_factory=list)
    connections: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)  # profiler-plugin calls; after read_log, every call
    messages: list[dict] = field(default_factory=list)
    tests: list[dict] = field(default_factory=list)
    issues: list[ParseIssue] = field(default_factory=list)
    parsed: int = 0
    # The inputs of calls.py: the streaming pass's call lines (Parquet), the call lines read
    # here, and each communicator's identity from the line that gave it.
    call_files: list[Path] = field(default_factory=list)
    call_lines: list[dict] = field(default_factory=list)
    comm_versions: list[dict] = field(default_factory=list)


@dataclass
class _Comm:
    row: dict
    connections: list[dict] = field(default_factory=list)


class _Reader:
    def __init__(self, path: Path, run_id: str, utc_offset_s: int):
        self.path = str(path)
        self.run_id = run_id
        self.utc_offset_s = utc_offset_s
        self.rows = LogRows()
        self.file_version: str | None = None
        self.versions: dict[tuple, str] = {}
        self.comms: dict[tuple, _Comm] = {}  # (host, pid, comm pointer)
        self.created: dict[tuple, int] = defaultdict(int)  # (host, pid, device, nranks) -> communicators so far
        self.networks: dict[tuple, dict[str, str]] = defaultdict(dict)  # (host, pid) -> kind -> detail
        self.setting_up: dict[tuple, _Comm] = {}  # (host, pid, device) -> communicator being set up
        self.pending: dict[tuple, list[dict]] = defaultdict(list)  # connections waiting for their communicator
        self.test: dict = {"name": None, "columns": None, "hosts": {}}

    # --- lines -----------------------------------------------------------------------------------

    def read_line(self, number: int, text: str) -> None:
        if "\x00" in text or sum(not c.isprintable() for c in text) > len(text) // 4:
            self.issue(number, "error", "binary data, not a log line; skipped")
            return
        line = grammar.parse_prefixed(text, self.utc_offset_s)
        if line is not None:
            self.nccl_line(number, line)
            return
        stripped = grammar.TAG_PREFIX.sub("", text).strip()
        if self.bare_line(number, stripped):
            self.rows.parsed += 1

    def nccl_line(self, number: int, line: grammar.Line) -> None:
        message = grammar.RANK_PREFIX.sub("", line.message)
        if line.level == "WARN":
            self.message(number, line, "WARN", grammar.classify(message), message)
        elif (version := grammar.VERSION.match(message)) is not None:
            self.versions[(line.host, line.pid)] = version.group(1)
        elif (coll := grammar.COLL.match(message)) is not None:
            self.call_line(number, line, coll)
        elif grammar.COLL_START.match(message):
            self.issue(number, "error", f"garbled COLL line skipped: {message[:120]!r}")
            return
        elif (init := grammar.INIT.match(message)) is not None:
            self.init(number, line, init)
        elif grammar.INIT_BARE.match(message):
            pass  # 2.3 prints `rank r nranks n` before the comm line that carries the same facts
        elif (connection := grammar.CONNECTION.match(message)) is not None:
            self.connection(number, line, connection)
        elif (chain := grammar.ERROR_CHAIN.match(message)) is not None:
            code = int(chain.group("code"))
            if code:
                self.message(number, line, line.level, grammar.RESULT_CLASSES.get(code, "other"), message)
        elif (timings := grammar.INIT_TIMINGS.match(message)) is not None:
            self.init_timings(line, timings)
        elif (network := grammar.USING_NETWORK.match(message)) is not None:
            self.network(line, network)
        elif not RING_ORDER.match(message):
            return  # an INFO line of no use to wirespeed
        self.rows.parsed += 1

    def bare_line(self, number: int, text: str) -> bool:
        """Lines without an NCCL prefix: version, watchdog, nccl-tests tables, profiler records."""
        if (version := grammar.VERSION.match(text)) is not None:
            self.file_version = version.group(1)
            return True
        if (timeout := grammar.WATCHDOG.search(text)) is not None:
            self.bare_message(number, int(timeout.group("rank")), "timeout", text)
            return True
        if (failure := grammar.WATCHDOG_FAILURE.search(text)) is not None:
            self.bare_message(number, int(failure.group("rank")), "timeout", text)
            return True
        if text.startswith("#") or self.test["columns"] is not None:
            return self.test_line(number, text)
        if text.startswith("{"):
            return self.profiler_record(number, text)
        if (name := TEST_NAME.search(text)) is not None:
            self.test["name"] = name.group(1)
            return True
        return False

    # --- communicators and connections ------------------------------------------------------

    def init(self, number: int, line: grammar.Line, init: re.Match) -> None:
        pointer = init.group("comm")
        key = (line.host, line.pid, pointer)
        nranks = int(init.group("nranks"))
        comm = self.comms.get(key)
        if comm is None:
            device = _int(init.group("device")) if init.group("device") is not None else line.device
            order = self.created[(line.host, line.pid, device, nranks)]
            self.created[(line.host, line.pid, device, nranks)] += 1
            comm_id = init.group("comm_id") or f"derived:{nranks}-ranks-#{order}"
            comm = _Comm({
                "run_id": self.run_id, "host": line.host, "pid": line.pid, "comm": pointer, "comm_id": comm_id,
                "comm_id_source": "commId" if init.group("comm_id") else "creation order",
                "rank": int(init.group("rank")), "nranks": nranks,
                "device": device,
                "nvml_device": _int(init.group("nvml")), "bus_id": init.group("bus"), "init_api": init.group("api"),
                "nccl_version": None, "network": None, "network_detail": None, "init_seconds": None,
                "log_file": self.path, "line": number,
            })
            self.comms[key] = comm
            self.comm_version(number, comm)
        elif init.group("comm_id") and comm.row["comm_id_source"] != "commId":
            comm.row.update(comm_id=init.group("comm_id"), comm_id_source="commId")
            self.comm_version(number, comm)
        setup = (line.host, line.pid, line.device)
        if init.group("phase") == "COMPLETE":
            comm.connections += self.pending.pop(setup, [])
            self.setting_up.pop(setup, None)
        else:  # Init START, or the 2.3/2.4 comm line printed when set-up begins
            comm.connections += self.pending.pop(setup, [])
            self.setting_up[setup] = comm

    def comm_version(self, number: int, comm: _Comm) -> None:
        """The communicator as calls on later lines see it (its comm_id may change once, to commId)."""
        row = comm.row
        self.rows.comm_versions.append({
            "log_file": self.path, "host": row["host"], "pid": row["pid"], "comm": row["comm"], "line": number,
            "comm_id": row["comm_id"], "rank": row["rank"], "comm_nranks": row["nranks"],
        })

    def connection(self, number: int, line: grammar.Line, match: re.Match) -> None:
        via = match.group("via").strip()
        transport = via.split("/")[0].split(" ")[0].upper()
        if via.startswith("direct shared memory"):
            transport = "SHM"
        row = {
            "run_id": self.run_id, "host": line.host, "pid": line.pid, "channel": int(match.group("channel")),
            "from_rank": int(match.group("src")), "to_rank": int(match.group("dst")), "direction": match.group("direction"),
            "transport": transport, "detail": via, "log_file": self.path, "line": number,
        }
        setup = (line.host, line.pid, line.device)
        if setup in self.setting_up:
            self.setting_up[setup].connections.append(row)
        else:
            self.pending[setup].append(row)

    def init_timings(self, line: grammar.Line, match: re.Match) -> None:
        for comm in self.comms.values():
            row = comm.row
            if (row["host"], row["pid"], row["rank"], row["nranks"]) == (line.host, line.pid, int(match.group("rank")), int(match.group("nranks"))):
                row["init_seconds"] = float(match.group("total"))

    def network(self, line: grammar.Line, match: re.Match) -> None:
        """Remember what networks a process reports: `Using network X` wins, then IB, then sockets."""
        known = self.networks[(line.host, line.pid)]
        if match.group("net"):
            known["chosen"] = match.group("net").strip()
        elif match.group("internal"):  # NCCL 2.3: "Using internal Network Socket" names the data network
            known["chosen"] = match.group("internal")
        elif "Using" in match.group("detail") and "sideband" not in match.group("detail"):
            known[match.group("kind")] = match.group("detail").strip()

    # --- calls, messages, nccl-tests, profiler records ---------------------------------------

    def call_line(self, number: int, line: grammar.Line, match: re.Match) -> None:
        """A call line the streaming pass left here, in its columns (lines.CALL_LINE_COLUMNS)."""
        self.rows.call_lines.append({
            "run_id": self.run_id, "log_file": self.path, "line": number, "host": line.host, "pid": line.pid,
            "tid": line.tid, "device": line.device, "comm": match.group("comm"), "op": match.group("op").lower(),
            "op_count": int(match.group("op_count"), 16), "count": int(match.group("count")),
            "datatype": match.group("datatype"), "reduce_op": match.group("reduce_op"), "root": int(match.group("root")),
            "nranks": _int(match.group("nranks")), "logged_at_ns": line.logged_at_ns,
        })

    def _call_row(self, number, host, pid, tid, device, pointer, comm, op, op_count, seq, count, datatype, size, root,
                  reduce_op, nranks, logged_at_ns, source) -> dict:
        buffer_bytes = count * size if size else None
        scale = nranks if op in grammar.PER_RANK_COUNT and nranks else 1
        return {
            "run_id": self.run_id, "host": host, "pid": pid, "tid": tid, "device": device, "comm": pointer,
            "comm_id": comm.row["comm_id"] if comm else None, "rank": comm.row["rank"] if comm else None,
            "op": op, "op_count": op_count, "seq": seq, "count": count, "dtype": datatype,
            "bytes": buffer_bytes, "message_bytes": buffer_bytes * scale if buffer_bytes is not None else None,
            "root": root, "reduce_op": reduce_op, "nranks": nranks, "logged_at_ns": logged_at_ns,
            "source": source, "log_file": self.path, "line": number,
        }

    def message(self, number: int, line: grammar.Line, level: str, kind: str, text: str) -> None:
        self.rows.messages.append({
            "run_id": self.run_id, "host": line.host, "pid": line.pid, "tid": line.tid, "device": line.device, "rank": None,
            "level": level, "class": kind, "where": line.where, "message": text, "logged_at_ns": line.logged_at_ns,
            "log_file": self.path, "line": number,
        })

    def bare_message(self, number: int, rank: int, kind: str, text: str) -> None:
        self.rows.messages.append({
            "run_id": self.run_id, "host": None, "pid": None, "tid": None, "device": None, "rank": rank,
            "level": "ERROR", "class": kind, "where": None, "message": text, "logged_at_ns": None,
            "log_file": self.path, "line": number,
        })

    def test_line(self, number: int, text: str) -> bool:
        if text.startswith("#"):
            if (device := TEST_DEVICE.match(text)) is not None:
                self.test["hosts"][int(device.group(1))] = device.group(2)
            elif TEST_HEADER.match(text):
                self.test["columns"] = text.lstrip("#").split()
            elif (name := TEST_NAME.search(text)) is not None:
                self.test["name"] = name.group(1)
            return True
        columns = self.test["columns"]
        values = text.split()
        if not values:
            return True
        if len(values) != len(columns) or not values[0].isdigit():
            self.test["columns"] = None
            return False
        self.test_rows(number, dict(enumerate(values)), columns)
        return True

    def test_rows(self, number: int, values: dict, columns: list[str]) -> None:
        """One table row holds an out-of-place block and an in-place block (time, algbw, busbw, check)."""
        head = {name: values[i] for i, name in enumerate(columns[: columns.index("time")])}
        blocks = [i for i, name in enumerate(columns) if name == "time"]
        for placement, start in zip(("out-of-place", "in-place"), blocks, strict=False):
            time_us = _float(values[start])
            algbw = _float(values[start + 1])
            busbw = _float(values[start + 2])
            check = values.get(start + 3)
            self.rows.tests.append({
                "run_id": self.run_id, "test": self.test["name"], "hosts": ",".join(sorted(set(self.test["hosts"].values()))) or None,
                "size_bytes": int(head["size"]), "count": int(head["count"]), "dtype": head.get("type"),
                "redop": head.get("redop"), "root": _int(head.get("root")), "placement": placement,
                "time_ns": round(time_us * 1000) if time_us is not None else None,
                "algbw_gbps": algbw * 8 if algbw is not None else None, "busbw_gbps": busbw * 8 if busbw is not None else None,
                "busbw_gbytes_per_s": busbw, "wrong": check, "log_file": self.path, "line": number,
            })

    def profiler_record(self, number: int, text: str) -> bool:
        try:
            record = orjson.loads(text.rstrip().rstrip(","))
        except orjson.JSONDecodeError:
            self.issue(number, "error", "profiler record does not parse; skipped")
            return False
        if not isinstance(record, dict) or record.get("cat") != "COLL" or record.get("ph") != "b":
            return isinstance(record, dict)
        args = record.get("args") or {}
        datatype = str(args.get("Datatype", "")).removeprefix("nccl").lower()
        size = grammar.DATATYPE_NAMES.get(datatype)
        comm_hash = args.get("CommHash")
        comm_id = f"0x{comm_hash:016x}" if isinstance(comm_hash, int) else None
        comm = next((c for c in self.comms.values() if c.row["comm_id"] == comm_id), None)
        op = COLLECTIVE_NAMES.get(str(record.get("name", "")).lower(), str(record.get("name", "")).lower())
        row = self._call_row(
            number, None, record.get("pid"), record.get("tid"), None, None, comm, op, None, args.get("SeqNum"),
            int(args.get("Count", 0)), datatype, size, None, None, comm.row["nranks"] if comm else None, None, "profiler plugin",
        )
        row.update(comm_id=comm_id, rank=args.get("Rank"))
        self.rows.calls.append(row)
        return True

    def issue(self, number: int, severity: str, reason: str) -> None:
        self.rows.issues.append(ParseIssue(self.path, number, None, severity, reason))

    # --- the end ------------------------------------------------------------------------------

    def finish(self) -> LogRows:
        for setup, rows in self.pending.items():
            for row in rows:
                row.update(comm=None, comm_id=None)
                self.rows.connections.append(row)
            if rows:
                self.issue(rows[0]["line"], "warning", f"{len(rows)} connection lines of {setup[0]}:{setup[1]} name no communicator in this log")
        for comm in self.comms.values():
            row = comm.row
            row["nccl_version"] = self.versions.get((row["host"], row["pid"]), self.file_version)
            known = self.networks.get((row["host"], row["pid"]), {})
            for name in ("chosen", "OFI", "IB", "Socket"):
                if name in known:
                    row["network"] = known["chosen"] if name == "chosen" else name
                    row["network_detail"] = known.get("IB" if name == "chosen" else name, "")[:200] or None
                    break
            self.rows.comms.append(row)
            for connection in comm.connections:
                connection.update(comm=row["comm"], comm_id=row["comm_id"])
                self.rows.connections.append(connection)
        return self.rows


def scan_log(path: Path, run_id: str, work: Path, utc_offset_s: int = 0) -> LogRows:
    """Read every whole line of an NCCL log (gzip-compressed or not), report the rest; the call
    lines stay in Parquet in `work` for calls.py."""
    reader = _Reader(path, run_id, utc_offset_s)
    split = lines.split(Path(path), work, run_id, utc_offset_s, lambda *issue: reader.issue(*issue))
    replaced = False
    for number, line in lines.other_lines(split):
        replaced = replaced or "\ufffd" in line
        if not line.strip():
            continue
        if number == split.cut_line:
            reader.issue(number, "error", f"the file ends in the middle of this line; skipped: {line[:80]!r}")
            continue
        reader.read_line(number, line)
    if replaced:
        reader.rows.issues.insert(0, ParseIssue(reader.path, None, None, "warning", "invalid UTF-8 was replaced by U+FFFD"))
    reader.rows.call_files = split.calls
    reader.rows.parsed += split.call_count
    return reader.finish()


def read_log(path: Path, run_id: str, utc_offset_s: int = 0) -> LogRows:
    """Every row of one NCCL log, its calls among them, as Python rows (for small logs and tests)."""
    with tempfile.TemporaryDirectory(prefix="wirespeed-nccl-") as work:
        rows = scan_log(path, run_id, Path(work), utc_offset_s)
        rows.calls = pl.concat([pl.DataFrame(schema=calls.schema()), *calls.frames([rows])]).sort("line").to_dicts()
    return rows


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
