"""polars alone on an NCCL log: the ceiling for wirespeed's NCCL row of the benchmark.

`python -m pipelines.testbed.bench.nccl_polars LOG OUT.parquet` reads the log's lines with polars'
streaming engine, keeps those with ` NCCL INFO `, splits them with the grammar's call-line
pattern and writes the fields to Parquet: the least any reader of these lines must do, with
nothing of what wirespeed adds (communicators, call order, the other line kinds, the warehouse).
"""

from __future__ import annotations

import sys

import polars as pl

from pipelines.read.nccl import grammar


def main() -> None:
    log, out = sys.argv[1:3]
    (
        pl.scan_lines(log, name="text")
        .filter(pl.col("text").str.contains(" NCCL INFO ", literal=True))
        .select(pl.col("text").str.extract_groups(grammar.COLL_LINE))
        .unnest("text")
        .sink_parquet(out)
    )


if __name__ == "__main__":
    main()
