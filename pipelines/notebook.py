"""The warehouse as polars frames, for notebooks: `from pipelines import open_warehouse`.

Analysts work with data frames; the warehouse is Parquet files per run and table, published by
replacing a link. `open_warehouse` reads them directly: `.table()` is a polars LazyFrame over
the published files of one run, several or all, so a notebook filters and aggregates before it
loads anything; `.sql()` runs DuckDB over the same views as `wirespeed sql` and hands back a
polars DataFrame. Nothing is written and nothing is locked, so it is safe beside a running ingest:
each call reads the versions published when it is made (a LazyFrame keeps reading those while an
ingest publishes a newer one, for the ten minutes the warehouse keeps a replaced version).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import polars as pl

from pipelines.commands.query import tables_named
from pipelines.folders import warehouse_dir
from pipelines.warehouse.store import ROLLUP_TABLES, SCHEMA_DIR, TABLES, Warehouse


def open_warehouse(path: str | Path | None = None) -> OpenWarehouse:
    """The warehouse at `path` (default as the CLI's `--warehouse`: $WIRESPEED_HOME or ./warehouse)."""
    store = Warehouse(warehouse_dir(path))
    if not (store.runs_dir / SCHEMA_DIR).is_dir():
        raise FileNotFoundError(f"no warehouse at {store.root} (`wirespeed ingest` makes one)")
    return OpenWarehouse(store)


class OpenWarehouse:
    """Read-only frames over one warehouse."""

    def __init__(self, store: Warehouse):
        self.store = store

    def __repr__(self) -> str:
        return f"open_warehouse({str(self.store.root)!r})"

    def runs(self) -> pl.DataFrame:
        """The published runs, one row each (the `runs` table)."""
        return self.table("runs").sort("run_id").collect()

    def table(self, name: str, run: str | Sequence[str] | None = None) -> pl.LazyFrame:
        """Table `name` of one run, of a list of runs, or of every published run (`run` None)."""
        if name in ROLLUP_TABLES:
            raise ValueError(f"{name} is a roll-up over all runs: read it with .sql('SELECT * FROM {name}')")
        if name not in TABLES:
            raise ValueError(f"no table {name!r}; the tables are {', '.join(TABLES)}")
        if run is None:
            folders = [self.store.published(run_id) for run_id in self.store.run_ids()]
        else:
            wanted = [run] if isinstance(run, str) else list(run)
            folders = [self.store.published(run_id) for run_id in wanted]
            missing = [run_id for run_id, folder in zip(wanted, folders, strict=True) if folder is None]
            if missing:
                raise LookupError(f"not in the warehouse {self.store.root}: {', '.join(map(repr, missing))}")
        # The schema file first: it gives every column its type, and a run from before a column
        # existed reads as NULL there.
        files = [self.store.runs_dir / SCHEMA_DIR / name / "empty.parquet"]
        files += sorted(part for folder in folders if folder is not None for part in (folder / name).glob("*.parquet"))
        return pl.scan_parquet(files, hive_partitioning=False, missing_columns="insert", extra_columns="ignore")

    def sql(self, query: str) -> pl.DataFrame:
        """A query over the warehouse, as `wirespeed sql` runs it, as a polars DataFrame."""
        con = self.store.connect(tables=tables_named(query))
        try:
            relation = con.sql(query)
            return pl.DataFrame() if relation is None else relation.pl()
        except duckdb.Error as problem:
            raise ValueError(f"the query failed: {problem}") from None
        finally:
            con.close()
