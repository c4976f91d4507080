"""The Kineto trace fields wirespeed reads, kept as data in one place.

`sql/trace_events.sql` maps them to columns; the exact parser keeps only these `args` keys; both
read the JSON through `event_json_columns()`, so a field added here is read by both paths.
Every value is read as text and cast in SQL, because real traces put strings where numbers
belong (`"pid": "Spans"`), numbers beyond int64 in `Comms Id`, and lists in `Input Dims`.
"""

from __future__ import annotations

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
    # Metadata events (`ph` "M") name processes and threads here.
    "name",
    "labels",
)

# Timestamps are microseconds with up to three decimals; DECIMAL keeps absolute-clock values
# (1.7e15 us) exact where a double would lose the nanoseconds.
TIME_TYPE = "DECIMAL(22,3)"


def event_json_columns() -> dict[str, str]:
    """The `columns` argument of DuckDB's `read_json` for one trace event."""
    args = ", ".join(f'"{key}" VARCHAR' for key in ARG_KEYS)
    return {
        "ph": "VARCHAR",
        "cat": "VARCHAR",
        "name": "VARCHAR",
        "pid": "VARCHAR",
        "tid": "VARCHAR",
        "ts": TIME_TYPE,
        "dur": TIME_TYPE,
        "args": f"STRUCT({args})",
    }
