"""The Flight Recorder's dump format, kept as data in one place: the collector writes it, ingest reads it.

PyTorch's Flight Recorder keeps the last N collectives of every process group in a ring buffer
and dumps them as JSON (`torch._C._distributed_c10d._dump_fr_trace_json()`, and, on builds with
NCCL, `_dump_nccl_trace_json()` for ProcessGroupNCCL's own recorder) or as a pickle (the same
dicts, `_dump_fr_trace()`, and what NCCL's dump-on-timeout writes). wirespeed writes the JSON form
and reads both, a pickle as plain values only (pipelines/read/plain_pickle.py); `sniff` knows either by
its first bytes.

The collector adds one key of its own, `wirespeed`, to the JSON it writes: what torch's dump
leaves out (the rank, the process groups' members as torch.distributed knows them, the reason
and time of the dump, and each thread's Python stack at that moment). Tools that read torch's
dumps ignore it.
"""

from __future__ import annotations

import re

from collectors import rundir

# Top-level keys of a dump.
VERSION = "version"
COMM_LIB_VERSION = "comm_lib_version"
PG_CONFIG = "pg_config"
PG_STATUS = "pg_status"
ENTRIES = "entries"  # absent when the buffer is empty
NCCL_COMM_STATE = "nccl_comm_state"

# Keys of one entry. Times are ns since the Unix epoch; a discovered time of 0 (JSON) or None
# (pickle) means not discovered; `duration_ms` (float, from device events) is present only where
# the backend times its collectives (NCCL with TORCH_NCCL_ENABLE_TIMING=1); `frames` only in
# pickle dumps, or JSON from elsewhere.
RECORD_ID = "record_id"
PG_ID = "pg_id"
PROCESS_GROUP = "process_group"  # [name, description]
COLLECTIVE_SEQ_ID = "collective_seq_id"
P2P_SEQ_ID = "p2p_seq_id"
OP_ID = "op_id"
PROFILING_NAME = "profiling_name"  # "<backend>:<op>[ <peers>]", e.g. "gloo:all_reduce", "nccl:send 0->1"
TIME_CREATED_NS = "time_created_ns"
DURATION_MS = "duration_ms"
INPUT_SIZES = "input_sizes"
INPUT_DTYPES = "input_dtypes"
OUTPUT_SIZES = "output_sizes"
OUTPUT_DTYPES = "output_dtypes"
STATE = "state"  # "scheduled", "started" or "completed"
TIME_STARTED_NS = "time_discovered_started_ns"
TIME_COMPLETED_NS = "time_discovered_completed_ns"
RETIRED = "retired"
TIMEOUT_MS = "timeout_ms"
IS_P2P = "is_p2p"
THREAD_ID = "thread_id"
THREAD_NAME = "thread_name"
FRAMES = "frames"  # [{name, filename, line}], innermost first
FRAME_KEYS = ("name", "filename", "line")

# Keys of pg_config (per group name) and pg_status (per recorder pg id).
PG_NAME, PG_DESC, PG_RANKS = "name", "desc", "ranks"
LAST_ENQUEUED, LAST_STARTED, LAST_COMPLETED = "last_enqueued_collective", "last_started_collective", "last_completed_collective"

# The collector's own key and what it holds.
SECTION = "wirespeed"
RANK, WORLD_SIZE, HOST, PID = "rank", "world_size", "host", "pid"
RECORDER = "recorder"  # "generic" (gloo and CPU collectives) or "nccl"
REASON, DUMPED_AT_NS = "reason", "dumped_at_ns"
BUFFER_ENTRIES = "buffer_entries"
GROUPS = "process_groups"  # [{name, desc, ranks: [global ranks]}]
STACKS = "stacks"  # [{thread, main, frames: [{name, filename, line}], innermost first}]
EARLIER = "earlier"  # [{reason, dumped_at_ns}] of this process's earlier dumps

RECORDERS = ("generic", "nccl")

# Where the collector writes: fr/rank<R>.json (the generic recorder) and fr/rank<R>.nccl.json.
FOLDER = rundir.FR


def dump_name(rank: int, recorder: str) -> str:
    return f"rank{rank}.json" if recorder == "generic" else f"rank{rank}.{recorder}.json"


# torch's own dumps carry no rank: torchfrtrace takes it from the digits that end the file name
# (`nccl_trace_rank_3`), and so does wirespeed, suffixes aside.
_RANK_IN_NAME = re.compile(r"(\d+)(?:\.nccl)?(?:\.json|\.pkl|\.pickle)?(?:\.gz)?$")


def rank_from_name(name: str) -> int | None:
    match = _RANK_IN_NAME.search(name)
    return int(match.group(1)) if match else None


# How a dump's first bytes give it away: a JSON object with the recorder's own keys (and none of a
# Kineto trace's), or a pickle (protocol 2 to 5) that names them.
_JSON_KEYS = re.compile(rb'"(?:comm_lib_version|pg_status|collective_seq_id|profiling_name)"\s*:')
_TRACE_KEYS = re.compile(rb'"(?:traceEvents|schemaVersion)"\s*:')
_PICKLE_KEYS = re.compile(rb"pg_config|pg_status|collective_seq_id")


def sniff(head: bytes) -> str | None:
    """'json' or 'pickle' when these first bytes of a file begin a Flight Recorder dump, else None."""
    if len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle" if _PICKLE_KEYS.search(head) else None
    if head.lstrip()[:1] == b"{" and _JSON_KEYS.search(head) and not _TRACE_KEYS.search(head):
        return "json"
    return None


def is_pickle(head: bytes) -> bool:
    """Whether the bytes begin a pickle of any kind (protocol 2 to 5)."""
    return len(head) > 2 and head[0] == 0x80 and 2 <= head[1] <= 5
