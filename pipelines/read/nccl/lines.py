"""The streaming pass over an NCCL log: its call lines become columns, the rest is left to the reader.

With `NCCL_DEBUG_SUBSYS=COLL` nearly every line of a log is one collective or point-to-point call
of one rank, and a large job's logs reach gigabytes. polars' streaming engine reads the lines on
every core and splits each call line into its fields with the grammar's own pattern
(`grammar.COLL_LINE`, in printable ASCII); every other line (versions, communicator set-up,
connections, warnings, nccl-tests tables, profiler records, garbage) goes, with its number, to
the per-line reader of logfile.py, which keeps the state those lines need. A call line is taken here only where
it is certain to read as the per-line reader reads it: printable ASCII, one `NCCL ` anchor,
numbers that fit their columns, and before the prefix nothing but text without a timestamp or
NCCL's own timestamp (Open MPI's stamps and anything doubtful go to the reader). So both ways
give the same rows.

The log is read in segments of about 64 MB cut at line ends, and each segment goes through the
engine with its first line's number. So memory is bounded by the segment whatever the engine
buffers, a gzip log is decompressed on the way (every member, as much of a cut one as there is,
and no further than a real file expands: the trace reader's bound, `splitter.expansion_bound`)
without a copy on disk, and since polars reads UTF-8 only, a segment with invalid UTF-8 is
read again with U+FFFD for the bad bytes, as Python's decoder replaces them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from isal import isal_zlib

from pipelines.read.kineto import splitter
from pipelines.read.nccl import grammar

SEGMENT_BYTES = 64 << 20
# A segment smaller than this (a whole small log, mostly: one per process with NCCL_DEBUG_FILE) is
# left to the per-line reader: starting the engine costs more than reading its lines in Python.
PER_LINE_BYTES = 16 << 10
# NCCL's timestamp where Python's datetime and polars' parser agree on what is a time (no leap
# second, no year 0); other stamps leave their lines to the per-line reader.
PLAIN_TIMESTAMP = r"\[[1-9]\d{3}-\d\d-\d\d[ _](?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?\] $"
# grammar.COLL_LINE with every class narrowed to printable ASCII: a line it matches is all
# printable ASCII (no binary garbage, nothing Unicode could read otherwise), and the regex engine
# runs on a smaller alphabet, a fifth faster than the Unicode classes.
PRINTABLE_CALL_LINE = (
    grammar.COLL_LINE.replace(".*?", r"[\x20-\x7e]*?")
    .replace(r"[^\s:\[\]]", r"[\x21-\x39\x3b-\x5a\x5c\x5e-\x7e]")
    .replace(r"[^)]", r"[\x20-\x28\x2a-\x7e]")
    .replace(r"\S", r"[\x21-\x7e]")
    .replace(r"[\d.]", r"[0-9.]")
    .replace(r"\d", "[0-9]")
)
CALL_LINE_COLUMNS = {
    "run_id": pl.String, "log_file": pl.String, "line": pl.Int64, "host": pl.String, "pid": pl.Int64,
    "tid": pl.Int64, "device": pl.Int32, "comm": pl.String, "op": pl.String, "op_count": pl.Int64,
    "count": pl.Int64, "datatype": pl.String, "reduce_op": pl.String, "root": pl.Int32, "nranks": pl.Int32,
    "logged_at_ns": pl.Int64,
}


@dataclass
class Split:
    calls: list[Path] = field(default_factory=list)  # Parquet: one row per call line, CALL_LINE_COLUMNS
    # Parquet of (line, text) of every other line that is not blank, or such lines of a small segment
    other: list[Path | list[tuple[int, str]]] = field(default_factory=list)
    call_count: int = 0
    cut_line: int | None = None  # the last line, when the file ends in the middle of it


def split(path: Path, work: Path, run_id: str, utc_offset_s: int, issue: Callable[[int | None, str, str], None]) -> Split:
    """Split the log at `path` into its call lines and the rest, segment by segment, in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    done = Split()
    first = 1
    for number, (segment, last) in enumerate(_segments(path, issue)):
        lines = segment.count(b"\n") + (not segment.endswith(b"\n"))
        if last and not segment.endswith(b"\n"):
            done.cut_line = first + lines - 1
        if len(segment) < PER_LINE_BYTES:
            done.other.append(_numbered(segment, first))
            first += lines
            continue
        calls, other = work / f"calls-{number:05d}.parquet", work / f"other-{number:05d}.parquet"
        try:
            _run(segment, first, calls, other, utc_offset_s, done.cut_line, [run_id, str(path)])
        except pl.exceptions.ComputeError as error:
            if "utf8" not in str(error).lower() and "utf-8" not in str(error).lower():
                raise
            _run(segment.decode("utf-8", errors="replace").encode(), first, calls, other, utc_offset_s, done.cut_line,
                 [run_id, str(path)])
        done.calls.append(calls)
        done.other.append(other)
        done.call_count += pq.ParquetFile(calls).metadata.num_rows
        first += lines
    return done


def other_lines(split: Split) -> Iterator[tuple[int, str]]:
    """The lines the streaming pass left to the per-line reader, in file order."""
    for part in split.other:
        if isinstance(part, list):
            yield from part
            continue
        for batch in pq.ParquetFile(part).iter_batches(batch_size=65_536):
            yield from zip(batch.column("line").to_pylist(), batch.column("text").to_pylist(), strict=True)


def _numbered(segment: bytes, first: int) -> list[tuple[int, str]]:
    """A small segment's lines that are not blank, with their numbers, as the engine would give them."""
    texts = segment.decode("utf-8", errors="replace").split("\n")
    if segment.endswith(b"\n"):
        texts.pop()
    numbered = ((first + i, text.rstrip("\r")) for i, text in enumerate(texts))
    return [(number, text) for number, text in numbered if text.strip()]


def _run(
    segment: bytes, first: int, calls: Path, other: Path, utc_offset_s: int, cut_line: int | None, names: list[str]
) -> None:
    """One streaming pass over a segment whose first line is line `first`: call lines to `calls`
    (their run and log file `names`), the rest to `other`."""
    lines = (
        pl.scan_lines(segment, name="text", row_index_name="line", row_index_offset=first)
        .with_columns(pl.col("line").cast(pl.Int64), pl.col("text").str.strip_chars_end("\r"))
        .with_columns(pl.col("text").str.extract_groups(PRINTABLE_CALL_LINE).alias("fields"))
        .unnest("fields")
    )
    before, text_col = pl.col("before"), pl.col("text")
    numbers = [pl.col(name).cast(pl.Int64, strict=False) for name in ("pid", "tid", "count")]
    small = [pl.col(name).cast(pl.Int32, strict=False) for name in ("device", "root", "nranks")]
    op_count = pl.col("op_count").str.to_integer(base=16, strict=False)
    plain_stamp = before.str.contains(PLAIN_TIMESTAMP)
    no_stamp = ~before.str.contains(grammar.NCCL_TIMESTAMP_TEXT) & ~before.str.contains(grammar.OPENMPI_PREFIX.pattern)
    fits = pl.all_horizontal([n.is_not_null() for n in numbers] + [op_count.is_not_null()]
                             + [s.is_not_null() | pl.col(s.meta.output_name()).is_null() for s in small])
    is_call = (
        pl.col("op").is_not_null()
        & (text_col.str.count_matches("NCCL ", literal=True) == 1)
        & (plain_stamp | no_stamp)
        & fits
        & (pl.col("line") != (cut_line or 0))
    )
    stamp = before.str.extract_groups(grammar.NCCL_TIMESTAMP_TEXT)
    seconds = (
        pl.concat_str(stamp.struct.field("day"), pl.lit(" "), stamp.struct.field("clock"))
        .str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S", strict=False)
        .dt.epoch("s")
    )
    nanos = stamp.struct.field("fraction").str.slice(1).str.pad_end(9, "0").str.slice(0, 9).cast(pl.Int64).fill_null(0)
    logged = pl.when(plain_stamp).then((seconds - utc_offset_s) * 1_000_000_000 + nanos)
    marked = lines.with_columns(is_call.alias("is_call"))
    call_rows = marked.filter("is_call").select(
        pl.lit(names[0]).alias("run_id"), pl.lit(names[1]).alias("log_file"), "line", "host", *numbers[:2], small[0],
        "comm", pl.col("op").str.to_lowercase(), op_count.alias("op_count"), numbers[2], "datatype", "reduce_op",
        small[1], small[2], logged.alias("logged_at_ns"),
    ).cast(CALL_LINE_COLUMNS)
    rest = marked.filter(~pl.col("is_call") & (text_col.str.strip_chars(" ") != "")).select("line", "text")
    pl.collect_all([call_rows.sink_parquet(calls, compression="lz4", lazy=True),
                    rest.sink_parquet(other, compression="lz4", lazy=True)], engine="streaming")


def _segments(path: Path, issue: Callable[[int | None, str, str], None]) -> Iterator[tuple[bytes, bool]]:
    """The log's bytes (decompressed, if gzip) in segments of whole lines, each with whether it is the last."""
    rest, previous = b"", None
    for block in _blocks(path, issue):
        data = rest + block
        end = data.rfind(b"\n") + 1
        rest = data[end:]
        if end:
            if previous is not None:
                yield previous, False
            previous = data[:end]
    if rest:
        if previous is not None:
            yield previous, False
        yield rest, True
    elif previous is not None:
        yield previous, True


def _blocks(path: Path, issue: Callable[[int | None, str, str], None]) -> Iterator[bytes]:
    """The log's bytes, SEGMENT_BYTES at a time: gzip members decompressed one after another."""
    with open(path, "rb") as handle:
        if handle.read(2) != b"\x1f\x8b":
            handle.seek(0)
            yield from iter(lambda: handle.read(SEGMENT_BYTES), b"")
            return
        handle.seek(0)
        member = isal_zlib.decompressobj(zlib.MAX_WBITS | 16)
        read = produced = 0
        while block := handle.read(SEGMENT_BYTES // 8):
            read += len(block)
            try:
                while block:
                    text = member.decompress(block, SEGMENT_BYTES)
                    produced += len(text)
                    if produced > splitter.expansion_bound(read):  # a decompression bomb: no further
                        issue(None, "error", str(splitter.too_expanded(read, produced)))
                        return
                    yield text
                    block = member.unconsumed_tail
                    if member.eof and member.unused_data:  # the next member of a concatenated gzip
                        block = member.unused_data
                        member = isal_zlib.decompressobj(zlib.MAX_WBITS | 16)
            except isal_zlib.error as damage:
                issue(None, "error", f"gzip data damaged within the first {read} bytes ({damage}); the rest is not read")
                return
