"""Grow an ingested run's `trace_events` to any number of device events, for the analysis benchmark.

Parsing 30 GB of JSON to get ten million device events would measure the parser again; the
analysis reads the events from `trace_events` and their counts from `ranks`. So the run's
normalised events are tiled in DuckDB the way `synth` tiles JSON: copy k is shifted by k times
the run's span, its step numbers move on by k times its step count, and its correlation,
External id, Seq and Comms Id move on so that launches still pair with kernels and collectives
still match across ranks, within their own copy only; `ranks` counts every copy.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from pipelines.warehouse import sql
from pipelines.warehouse.store import PARSE_TABLES


def scaled_version(parsed: Path, target: Path, device_events: int) -> int:
    """Make `target` a parsed version like `parsed`, its events tiled to `device_events`; return tiles."""
    for table in PARSE_TABLES:
        if table not in ("trace_events", "ranks"):
            shutil.copytree(parsed / table, target / table, dirs_exist_ok=True)
    return tile_events(parsed, target, device_events)


def count_device_events(version: Path) -> int:
    """Device events in a version's `trace_events`, by the analysis's own definition."""
    con = sql.session()
    try:
        sql.use_macros(con)
        sql.set_variables(con, events=str(version / "trace_events" / "*.parquet"))
        query = "SELECT count(*) FROM read_parquet(getvariable('events')) WHERE ph = 'X' AND is_device_event(cat)"
        return con.execute(query).fetchall()[0][0]
    finally:
        con.close()


def tile_events(source_version: Path, target_version: Path, device_events: int) -> int:
    """Write `trace_events` of about `device_events` device events into `target_version`, and
    `ranks` counting them, each file's span as long as its copies; return tiles."""
    per_tile = count_device_events(source_version)
    con = duckdb.connect(config={"preserve_insertion_order": False})
    try:
        sql.set_variables(con, events=str(source_version / "trace_events" / "*.parquet"))
        con.execute("CREATE VIEW source AS SELECT * FROM read_parquet(getvariable('events'))").fetchall()
        span, steps, ids = con.execute(
            """
            SELECT
              max(ts_ns + coalesce(dur_ns, 0)) - min(ts_ns) + 1000,
              coalesce(max(TRY_CAST(regexp_extract(name, '^ProfilerStep#(\\d+)$', 1) AS BIGINT)), 0) + 1,
              greatest(coalesce(max(correlation), 0), coalesce(max(external_id), 0), coalesce(max(seq), 0)) + 1
            FROM source
            """
        ).fetchall()[0]
        tiles = max(1, round(device_events / max(per_tile, 1)))
        sql.set_variables(con, tiles=tiles, span=span, steps=steps, ids=ids)
        (target_version / "trace_events").mkdir(parents=True, exist_ok=True)
        shifted = sql.table("trace_events").select_from("tiled")
        con.execute(
            """
            CREATE TEMP VIEW tiled AS
            SELECT
              * REPLACE (
                ts_ns + tile * getvariable('span') AS ts_ns,
                CASE WHEN regexp_matches(name, '^ProfilerStep#\\d+$')
                     THEN 'ProfilerStep#' || (CAST(regexp_extract(name, '#(\\d+)', 1) AS BIGINT) + tile * getvariable('steps'))
                     ELSE name END AS name,
                correlation + tile * getvariable('ids') AS correlation,
                external_id + tile * getvariable('ids') AS external_id,
                seq + tile * getvariable('ids') AS seq,
                CASE WHEN comms_id IS NULL OR tile = 0 THEN comms_id ELSE hash(comms_id, tile) END AS comms_id
              )
            FROM source, range(getvariable('tiles')) AS t(tile)
            """
        ).fetchall()
        sql.write_parquet(con, f"({shifted})", target_version / "trace_events" / "part-00000.parquet")
        sql.set_variables(con, ranks=str(source_version / "ranks" / "*.parquet"))
        con.execute(
            """
            CREATE TEMP VIEW tiled_ranks AS
            SELECT * REPLACE (
              events * getvariable('tiles') AS events,
              device_events * getvariable('tiles') AS device_events,
              last_ns + (getvariable('tiles') - 1) * CAST(getvariable('span') AS BIGINT) AS last_ns
            )
            FROM read_parquet(getvariable('ranks'))
            """
        ).fetchall()
        (target_version / "ranks").mkdir(parents=True, exist_ok=True)
        sql.write_parquet(con, f"({sql.table('ranks').select_from('tiled_ranks')})", target_version / "ranks" / "part-00000.parquet")
    finally:
        con.close()
    return tiles
