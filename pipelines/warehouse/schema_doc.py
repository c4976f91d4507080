"""Generate docs/schema.md from the headers of the SQL files, so the two cannot drift apart.

    python -m pipelines.warehouse.schema_doc > docs/schema.md
"""

from __future__ import annotations

from pipelines.warehouse import sql
from pipelines.warehouse.store import ANALYSIS_TABLES, PARSE_TABLES, ROLLUP_TABLES

INTRO = """# Schema

Every table wirespeed publishes, generated from the header of its SQL file (`sql/<table>.sql`) by
`python -m pipelines.warehouse.schema_doc`. The header is also the table's contract: the SQL runner casts each
query's result to exactly these columns and types. A table *empty without* another has no rows
when that one has none (Flight Recorder tables without dumps); the runner then builds it empty
without running its query.

Conventions: times are integer nanoseconds since the Unix epoch (`_ns`), durations integer
nanoseconds, sizes bytes (`_bytes` or `bytes`), rates Gbit/s (`_gbps`, 10^9 bit/s). Every per-run
table has `run_id`; query across runs freely, or filter on it.

In DuckDB (`wirespeed sql`, or `duckdb warehouse/catalog.duckdb`) each table is a view over the
Parquet files of every published run (with `wirespeed sql --run RUN_ID`, of those runs alone:
a query over every run reads every run's files); see docs/architecture.md for the layout.
`wirespeed sql` also has the macros the tables are built with (sql/macros.sql), such as
`busbw_factor(op, n)` and `normal_sf(z)`.
"""

GROUPS = (
    ("Parse tables", "Written by reading a run's raw inputs (asset group `ingest`).", PARSE_TABLES),
    ("Analysis tables", "Derived by SQL from the parse tables (asset group `analysis`); re-derivable without the raw inputs.", ANALYSIS_TABLES),
    ("Roll-ups", "Rebuilt over all runs on a schedule (asset group `rollups`), and updated for the runs an ingest adds.", ROLLUP_TABLES),
)


def schema_markdown() -> str:
    parts = [INTRO]
    for title, note, names in GROUPS:
        parts.append(f"## {title}\n\n{note}\n")
        for name in names:
            table = sql.table(name)
            rows = "\n".join(f"| `{c.name}` | `{c.type}` | {c.doc} |" for c in table.columns)
            empty = f"**Empty without:** {', '.join(f'`{t}`' for t in table.empty_without)}. " if table.empty_without else ""
            parts.append(
                f"### `{name}`\n\n{table.summary[0].upper()}{table.summary[1:]}\n\n{table.explanation}\n\n"
                f"**Grain:** {table.grain.rstrip('.')}. {empty}**SQL:** `sql/{name}.sql`.\n\n"
                f"| column | type | meaning |\n|---|---|---|\n{rows}\n"
            )
    return "\n".join(parts)


if __name__ == "__main__":
    print(schema_markdown(), end="")
