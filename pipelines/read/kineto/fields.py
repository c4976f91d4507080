"""The Kineto trace fields wirespeed reads, kept as data in one place.

`sql/trace_events.sql` maps them to columns; the exact parser keeps only these `args` keys; both
read the JSON through `event_json_columns()`, so a field added here is read by both paths.
Every value is read as text and cast in SQL, because real traces put strings where numbers
belong (`"pid": "Spans"`), numbers beyond int64 in `Comms Id`, and lists in `Input Dims`.
"""

from __future__ import annotations

# Durations above a week are CUPTI counter overflows, not real activity (HTA drops them too).
MAX_PLAUSIBLE_DUR_NS = 7 * 24 * 3600 * 10**9

# Keys of `args` that become columns of `trace_events` (see sql/trace_events.sql for the mapping).
ARG_KEYS: tuple[str, ...] = (
    "External id",
    "correlation",
    "device",
    "stream",
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Seq",
    "Comms Id",
    "In split size",
    "Out split size",
    "Src Rank",
    "Dst Rank",
    "Input Dims",
    "Input type",
    # The concrete arguments of an operator: `c10d::send`'s and `c10d::recv_`'s third is the peer.
    "Concrete Inputs",
    # A `cuda_sync` event's stream and the correlation of the `cudaEventRecord` it waits on.
    "wait_on_stream",
    "wait_on_cuda_event_record_corr_id",
    # Metadata events (`ph` "M") name processes and threads here.
    "name",
    "labels",
)

# Timestamps are microseconds with up to three decimals. DECIMAL keeps absolute-clock values
# (1.7e15 us) exact where a double would lose the nanoseconds. Below 2^43 us (101 days) a double's
# spacing is under a nanosecond, so its whole microseconds and fraction give the nanoseconds
# exactly (sql/trace_events.sql), as for times relative to a trace's `baseTimeNanoseconds`; and
# DuckDB reads a double a third faster. A time read as a double that lands within a microsecond
# of that limit, or past it, may be off by a nanosecond: its file is read again as decimals.
EXACT_TIME_TYPE = "DECIMAL(22,3)"
FAST_TIME_TYPE = "DOUBLE"
FAST_TIME_LIMIT_NS = (2**43 - 1) * 1000


def event_json_columns(time_type: str = EXACT_TIME_TYPE) -> dict[str, str]:
    """The `columns` argument of DuckDB's `read_json` for one trace event, times read as `time_type`."""
    args = ", ".join(f'"{key}" VARCHAR' for key in ARG_KEYS)
    return {
        "ph": "VARCHAR",
        "cat": "VARCHAR",
        "name": "VARCHAR",
        "pid": "VARCHAR",
        "tid": "VARCHAR",
        "ts": time_type,
        "dur": time_type,
        "args": f"STRUCT({args})",
    }
