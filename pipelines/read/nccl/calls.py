"""The nccl_calls rows of a run's logs, batch by batch, in bounded memory.

Each call line, whichever reader split it (lines.py, or logfile.py for the lines it leaves), gets
its position among its communicator's calls in its process (`seq`, in line order), its
communicator's identity as it stood at the call's line (an Init line may name the commId only
after the first calls), and the sizes of its element type. The streaming pass's Parquet is read a
row group at a time, the reader's call lines are merged in by line, small logs share a batch, and
a running count per communicator carries `seq` from one batch to the next; each batch becomes one
Parquet part of the table. sql/nccl_calls.sql documents the columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from pipelines.read.nccl import grammar, lines
from pipelines.warehouse import sql

KEY = ["log_file", "host", "pid", "comm"]
BATCH_ROWS = 100_000
POLARS_TYPES = {"VARCHAR": pl.String, "BIGINT": pl.Int64, "INTEGER": pl.Int32, "DOUBLE": pl.Float64}
VERSION_COLUMNS = {
    "log_file": pl.String, "host": pl.String, "pid": pl.Int64, "comm": pl.String, "line": pl.Int64,
    "comm_id": pl.String, "rank": pl.Int32, "comm_nranks": pl.Int32,
}


def schema() -> dict[str, pl.DataType]:
    """nccl_calls' columns and types, from its SQL file."""
    return {c.name: POLARS_TYPES[c.type] for c in sql.table("nccl_calls").columns}


def write(logs: list, folder: Path) -> int:
    """Write the calls of `logs` (logfile.LogRows of one run) as parts in `folder`; return the parts."""
    parts = 0
    for frame in frames(logs):
        frame.write_parquet(folder / f"part-{parts:05d}.parquet", compression="zstd")
        parts += 1
    if not parts:
        sql.write_empty("nccl_calls", folder / "part-empty.parquet")
    return parts


def frames(logs: list) -> Iterator[pl.DataFrame]:
    """nccl_calls rows of `logs`, about BATCH_ROWS at a time (many small logs share a batch)."""
    wanted = schema()
    versions = pl.DataFrame([v for log in logs for v in log.comm_versions], schema=VERSION_COLUMNS, orient="row").sort("line")
    counted = pl.DataFrame(schema={**{k: lines.CALL_LINE_COLUMNS[k] for k in KEY}, "calls": pl.Int64})
    pending: list[pl.DataFrame] = []
    for piece in _pieces(logs):
        pending.append(piece)
        if sum(p.height for p in pending) >= BATCH_ROWS:
            batch, counted = _numbered(pl.concat(pending).sort("line"), counted)
            yield _named(batch, versions).select([pl.col(name).cast(kind) for name, kind in wanted.items()])
            pending = []
    if pending:
        batch, counted = _numbered(pl.concat(pending).sort("line"), counted)
        yield _named(batch, versions).select([pl.col(name).cast(kind) for name, kind in wanted.items()])
    profiler = [row for log in logs for row in log.calls]  # profiler-plugin records, complete rows already
    if profiler:
        yield pl.DataFrame(profiler, schema=wanted, orient="row")


def _pieces(logs: list) -> Iterator[pl.DataFrame]:
    """Each log's call lines in line order, a batch at a time: the streaming pass's with the per-line
    reader's merged in by line."""
    for log in logs:
        read_here = pl.DataFrame(log.call_lines, schema=lines.CALL_LINE_COLUMNS, orient="row").sort("line")
        for batch in _batches(log.call_files):
            if batch.height and read_here.height:
                last = batch["line"].max()
                batch = pl.concat([batch, read_here.filter(pl.col("line") <= last)])
                read_here = read_here.filter(pl.col("line") > last)
            if batch.height:
                yield batch
        if read_here.height:
            yield read_here


def _batches(paths: list[Path]) -> Iterator[pl.DataFrame]:
    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
            yield pl.from_arrow(batch).cast(lines.CALL_LINE_COLUMNS)


def _numbered(batch: pl.DataFrame, counted: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`seq` of each call of a batch in line order, on from the calls of its communicator before."""
    numbered = (
        batch.join(counted, on=KEY, how="left")
        .with_columns((pl.col("calls").fill_null(0) + pl.int_range(pl.len(), dtype=pl.Int64).over(KEY)).alias("seq"))
        .drop("calls")
    )
    now = batch.group_by(KEY).agg(pl.len().cast(pl.Int64).alias("calls"))
    counted = pl.concat([counted, now]).group_by(KEY).agg(pl.col("calls").sum())
    return numbered, counted


def _named(batch: pl.DataFrame, versions: pl.DataFrame) -> pl.DataFrame:
    """Communicator, sizes and names of each call (batch and versions sorted by line)."""
    code = pl.col("datatype").cast(pl.Int64, strict=False)
    size = code.replace_strict({k: s for k, (_, s) in grammar.DATATYPES.items()}, default=None, return_dtype=pl.Int64)
    dtype = code.replace_strict({k: n for k, (n, _) in grammar.DATATYPES.items()}, default=None, return_dtype=pl.String)
    reduce_op = pl.col("reduce_op").cast(pl.Int64, strict=False).replace_strict(grammar.REDUCE_OPS, default=None, return_dtype=pl.String)
    nranks = pl.when(pl.col("nranks") != 0).then(pl.col("nranks")).otherwise(pl.col("comm_nranks"))
    per_rank = pl.col("op").is_in(grammar.PER_RANK_COUNT) & pl.col("nranks").is_not_null() & (pl.col("nranks") != 0)
    return (
        batch.join_asof(versions, on="line", by=KEY, strategy="backward", check_sortedness=False)
        .with_columns(nranks.alias("nranks"), (pl.col("count") * size).alias("bytes"),
                      dtype.fill_null(pl.lit("code ") + pl.col("datatype")).alias("dtype"))
        .with_columns(
            (pl.col("bytes") * pl.when(per_rank).then(pl.col("nranks").cast(pl.Int64)).otherwise(1)).alias("message_bytes"),
            pl.when(pl.col("op").is_in(grammar.REDUCTIONS)).then(reduce_op.fill_null(pl.lit("code ") + pl.col("reduce_op"))).alias("reduce_op"),
            pl.lit("debug log").alias("source"),
        )
    )
