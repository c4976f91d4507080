"""The shapes of NCCL debug-log lines, NCCL 2.3 to 2.31, as regular expressions and small parsers.

A line is found by its anchor (`NCCL INFO`, `NCCL WARN`, `NCCL TRACE`, `NCCL CALL`) and parsed
backwards from it for `host:pid:tid [device]`; whatever stands before is a launcher's prefix
(`[0] ` from mpirun, OpenMPI's timestamp and tag, Ray's `(RayTrainWorker pid=…)`, log collectors)
except for NCCL's own timestamp (2.26+), which sits right before the host. docs/nccl.md lists the
versions each shape comes from.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

PREFIX_HEAD = (
    r"(?P<host>[^\s:\[\]]*):(?P<pid>\d+):(?P<tid>\d+)(?: \[(?P<device>\d+)\])?"
    r"(?: (?P<where>\S+:\d+)(?: \((?P<function>[^)]*)\))?)?"
    r"(?: [\d.]+ \S+:\d+)?"  # TRACE lines: milliseconds since init, then function:line
)
PREFIX = re.compile(PREFIX_HEAD + r" NCCL (?P<level>INFO|WARN|TRACE|CALL) ?(?P<message>.*)$")
NCCL_TIMESTAMP_TEXT = r"\[(?P<day>\d{4}-\d\d-\d\d)[ _](?P<clock>\d\d:\d\d:\d\d)(?P<fraction>\.\d+)?\] $"
NCCL_TIMESTAMP = re.compile(NCCL_TIMESTAMP_TEXT)
OPENMPI_PREFIX = re.compile(r"^(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\[(\d+),(\d+)\]<std\w+>:")
TAG_PREFIX = re.compile(r"^\[\d+(?:,\d+)?\] ?")
RANK_PREFIX = re.compile(r"^\[Rank \d+\] ")  # PyTorch's, before a message

VERSION = re.compile(r"^NCCL version (\d+\.\d+\.\d+)\S*")
INIT = re.compile(
    r"^(?:(?P<api>nccl\w+) )?comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r"(?: cudaDev (?P<device>\d+))?(?: nvmlDev (?P<nvml>\d+))?(?: busId (?P<bus>[0-9a-fx]+))?"
    r"(?: commId (?P<comm_id>0x[0-9a-f]+))?(?P<rest>.*?)(?: - Init (?P<phase>COMPLETE|START))?$"
)
INIT_BARE = re.compile(r"^rank (?P<rank>\d+) nranks (?P<nranks>\d+)$")
INIT_TIMINGS = re.compile(r"^Init timings(?: -)? ?(?P<api>\w*):? rank (?P<rank>\d+) nranks (?P<nranks>\d+) total (?P<total>[\d.]+)")
CONNECTION = re.compile(
    r"^(?:Channel|Ring) (?P<channel>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[(?P<src_dev>[0-9a-fx]+)\])? -> "
    r"(?P<dst>\d+)(?:\[(?P<dst_dev>[0-9a-fx]+)\])?(?: \[(?P<direction>send|receive)\])? via (?P<via>.+)$"
)
USING_NETWORK = re.compile(r"^(?:Using network (?P<net>.+)|NET/(?P<kind>IB|Socket|OFI|Plugin) ?: ?(?P<detail>.+)|Using internal Network (?P<internal>\w+))$")
COLL_BODY = (
    r"(?P<op>[A-Za-z]+): opCount (?P<op_count>[0-9a-f]+) sendbuff (?P<sendbuff>\S+) recvbuff (?P<recvbuff>\S+) "
    r"count (?P<count>\d+) datatype (?P<datatype>\d+) op (?P<reduce_op>\d+) root (?P<root>-?\d+) "
    r"comm (?P<comm>0x[0-9a-f]+|\(nil\))(?: \[nranks=(?P<nranks>\d+)\])?(?: stream (?P<stream>\S+))?"
    r"(?: task (?P<task>\d+))?(?: globalrank (?P<globalrank>\d+))?"
)
COLL = re.compile(f"^{COLL_BODY}$")
# A whole line that is one collective or point-to-point call, as the lines above read it: whatever
# stands before the prefix, the prefix, a level that is not WARN, the message (maybe after PyTorch's
# rank tag) and trailing spaces. For engines that read lines by the million (logfile.py).
COLL_LINE = (
    r"^(?P<before>.*?)" + PREFIX_HEAD + r" NCCL (?:INFO|TRACE|CALL) ?(?:\[Rank \d+\] )?" + COLL_BODY + r" *$"
)
COLL_START = re.compile(r"^[A-Za-z]+: opCount ")
ERROR_CHAIN = re.compile(r"^(?P<where>[\w/.]+\.(?:cc|h|cpp):\d+) -> (?P<code>\d+)(?P<rest>.*)$")
WATCHDOG = re.compile(
    r"\[Rank (?P<rank>\d+)\]\s+Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
    r"OpType=(?P<op>\w+)"
)
WATCHDOG_FAILURE = re.compile(r"Rank (?P<rank>\d+)\]\s+failure detected by watchdog at work sequence id: (?P<seq>\d+)")

# NCCL's datatype codes (ncclDataType_t) and the bytes of one element of each.
DATATYPES = {
    0: ("int8", 1), 1: ("uint8", 1), 2: ("int32", 4), 3: ("uint32", 4), 4: ("int64", 8), 5: ("uint64", 8),
    6: ("float16", 2), 7: ("float32", 4), 8: ("float64", 8), 9: ("bfloat16", 2), 10: ("fp8e4m3", 1), 11: ("fp8e5m2", 1),
}
DATATYPE_NAMES = {name: size for name, size in DATATYPES.values()}
REDUCE_OPS = {0: "sum", 1: "prod", 2: "max", 3: "min", 4: "avg"}
# Ops whose COLL `count` is per rank, so that the nccl-tests message size S is count x size x nranks.
PER_RANK_COUNT = ("allgather", "reducescatter", "alltoall", "gather", "scatter")
# Ops whose `op` field is a reduction (sum, max, ...); for the others it means nothing.
REDUCTIONS = ("allreduce", "reduce", "reducescatter")
# ncclResult_t codes, as error chains (`file.cc:123 -> 2`) report them.
RESULT_CLASSES = {
    1: "cuda error", 2: "system error", 3: "internal error", 4: "invalid argument", 5: "invalid usage",
    6: "remote error", 7: "in progress", 8: "timeout",
}
MESSAGE_CLASSES = (
    ("timeout", re.compile(r"time ?out|timed out|watchdog", re.I)),
    ("cuda error", re.compile(r"cuda (failure|error)|cudaError", re.I)),
    ("network error", re.compile(r"NET/(IB|OFI|Socket).*(error|completion|status=)|IB.*(error|failed)", re.I)),
    ("connection failure", re.compile(r"connect|connection|socket|could not receive|proxy|magic|refused|closed", re.I)),
    ("system error", re.compile(r"system error|out of memory|no such file", re.I)),
)


@dataclass
class Line:
    """One NCCL-prefixed line, split into its parts."""

    host: str
    pid: int
    tid: int
    device: int | None
    level: str
    where: str | None
    message: str
    logged_at_ns: int | None


def parse_prefixed(text: str, utc_offset_s: int) -> Line | None:
    """Split an NCCL line into prefix fields and message; None when it has no NCCL anchor."""
    if "NCCL " not in text:
        return None
    match = PREFIX.search(text)
    if match is None:
        return None
    before = text[: match.start()]
    logged = None
    stamp = NCCL_TIMESTAMP.search(before)
    if stamp:
        logged = _epoch_ns(stamp.group(1), stamp.group(2), stamp.group(3), utc_offset_s)
    else:
        launcher = OPENMPI_PREFIX.match(before)
        if launcher:
            logged = _ctime_ns(launcher.group(1), utc_offset_s)
    device = match.group("device")
    return Line(
        match.group("host"),
        int(match.group("pid")),
        int(match.group("tid")),
        int(device) if device is not None else None,
        match.group("level"),
        match.group("where"),
        match.group("message").rstrip(),
        logged,
    )


def _epoch_ns(day: str, clock: str, fraction: str | None, utc_offset_s: int) -> int | None:
    try:
        local = dt.datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=dt.timezone(dt.timedelta(seconds=utc_offset_s)))
    except ValueError:
        return None
    nanos = int((fraction or ".0")[1:].ljust(9, "0")[:9])
    return int(local.timestamp()) * 10**9 + nanos


def _ctime_ns(text: str, utc_offset_s: int) -> int | None:
    try:
        local = dt.datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return int(local.replace(tzinfo=dt.timezone(dt.timedelta(seconds=utc_offset_s))).timestamp()) * 10**9


def classify(message: str) -> str:
    for name, pattern in MESSAGE_CLASSES:
        if pattern.search(message):
            return name
    return "other"
