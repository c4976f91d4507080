"""`wirespeed sql`: run a query against the warehouse and print it as a table, CSV or JSON.

The session is in-memory with a view per table the query names, so it never takes a lock that
ingestion needs. A view over every run reads each run's file, about a millisecond a run; with
`runs` the per-run tables hold those runs alone, and a query costs the same in any warehouse.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
from pathlib import Path
from typing import TextIO

import duckdb

from pipelines.warehouse import sql
from pipelines.warehouse.store import ROLLUP_TABLES, TABLES, Warehouse


def run_query(warehouse_dir: Path, query: str, runs: list[str] | None = None) -> tuple[list[str], list[tuple]]:
    store = Warehouse(warehouse_dir)
    store.ensure()
    missing = [run_id for run_id in runs or () if store.published(run_id) is None]
    if missing:
        raise LookupError(f"not in the warehouse {store.root}: {', '.join(map(repr, missing))}")
    con = store.connect(tables=tables_named(query), runs=runs)
    try:
        relation = con.sql(query)
        if relation is None:  # a statement that returns nothing (SET, CREATE TEMP VIEW, ...)
            return [], []
        return list(relation.columns), relation.fetchall()
    except duckdb.Error as problem:
        raise ValueError(f"the query failed: {problem}") from None
    finally:
        con.close()


def tables_named(query: str) -> tuple[str, ...]:
    """The warehouse's tables that `query` names (sql.tables_named, not kept: queries here are
    ad hoc); all of them for a query that names none (`information_schema`, `duckdb_views()`) or
    is not one statement."""
    try:
        return sql.tables_named([query], TABLES + ROLLUP_TABLES) or TABLES + ROLLUP_TABLES
    except ValueError:
        return TABLES + ROLLUP_TABLES


def print_query(warehouse_dir: Path, query: str, output_format: str, out: TextIO, runs: list[str] | None = None) -> None:
    columns, rows = run_query(warehouse_dir, query, runs)
    if output_format == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_plain(v) for v in row] for row in rows])
    elif output_format == "json":
        out.write(json.dumps([dict(zip(columns, map(_plain, row), strict=True)) for row in rows], indent=2))
        out.write("\n")
    else:
        out.write(text_table(columns, rows))


def _plain(value):
    """A value as JSON or CSV can hold it: exact decimals and times become text."""
    if isinstance(value, (decimal.Decimal, dt.date, dt.datetime, dt.time, dt.timedelta)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, dict)):
        return json.loads(json.dumps(value, default=str))
    return value


def text_table(columns: list[str], rows: list[tuple]) -> str:
    """Rows as aligned plain text, NULL shown as NULL, with a row count."""
    cells = [["NULL" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    lines = [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"
