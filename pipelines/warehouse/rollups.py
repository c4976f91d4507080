"""Tables over all runs: the run summary, scaling across runs of a job, each run's verdict and its regressions.

They are rebuilt whole on a schedule, updated for the runs just ingested after an ingest, and
recomputed live (same SQL) wherever the freshest answer matters, such as a report, unless the
stored rows are known to be current: a stamp beside them says from which version of each run,
and from which SQL and settings, they were computed. An update or a live answer reads only the
runs it concerns and the other runs of their jobs, so it costs the same in a warehouse of ten
runs as in one of ten thousand; the one exception is the first update after the SQL or settings
changed, which rebuilds them whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection

import duckdb

from pipelines.read.kineto.fields import MAX_PLAUSIBLE_DUR_NS
from pipelines.settings import Settings
from pipelines.warehouse import sql
from pipelines.warehouse.store import ROLLUP_TABLES, TABLES, Warehouse

# The runs whose roll-up rows depend on `changed`: those runs and every run of their jobs, under
# the job each has now and the one the stored roll-ups knew it by (scaling compares within a job).
# A run whose stored rows are current (`current_runs`) is found by its stored `scaling` row; the
# session's `runs` holds the other runs and `changed`.
_JOB_MATES = """
WITH jobs AS (
  SELECT coalesce(job, run_id) AS job FROM runs WHERE list_contains(getvariable('changed'), run_id)
  UNION
  SELECT job FROM scaling WHERE list_contains(getvariable('changed'), run_id)
)
SELECT run_id FROM runs WHERE coalesce(job, run_id) IN (SELECT job FROM jobs)
UNION
SELECT run_id FROM scaling
WHERE job IN (SELECT job FROM jobs) AND run_id IN (SELECT unnest(getvariable('current_runs')))
"""


def session(
    store: Warehouse, settings: Settings, runs: Collection[str] | None = None, queries: list[str] = (),
    shared: sql.SharedSession | None = None,
) -> duckdb.DuckDBPyConnection:
    """A session over every published run (or only `runs`), with the roll-ups' macros and thresholds,
    and views of the tables that the roll-ups and `queries` read (with `shared`: a connection to
    that shared session, which every other connection to it shares; see Warehouse.connect).

    Roll-up rows computed over `runs` are exact for runs whose job mates are all among them.
    """
    tables = sql.tables_read([sql.table(name).select() for name in ROLLUP_TABLES] + list(queries), TABLES + ROLLUP_TABLES)
    con = store.connect(settings.duckdb_config(), runs, tables, shared)
    if shared is None:
        sql.set_variables(con, **_variables(settings))
        sql.use_macros(con)
    else:
        shared.set_variables(**_variables(settings), **sql.macro_variables())
        shared.sync(con)
    return con


def _variables(settings: Settings) -> dict:
    return {"comm_pattern": settings.comm_regex(), "max_dur_ns": MAX_PLAUSIBLE_DUR_NS, **settings.verdict, **settings.regressions}


STAMP = "stamp.json"  # in the published roll-ups' folder: {"basis": ..., "versions": {run_id: version folder}}


def _basis(settings: Settings) -> str:
    """What the roll-up rows depend on besides the runs' tables: their SQL and what it reads from the settings."""
    texts = [sql.table(name).select() for name in ROLLUP_TABLES] + [sql.macros_text()]
    facts = json.dumps([texts, _variables(settings), sql.macro_variables()], sort_keys=True, default=str)
    return hashlib.sha256(facts.encode()).hexdigest()


def _versions(store: Warehouse, runs: Collection[str]) -> dict[str, str | None]:
    return {run_id: (version.name if (version := store.published(run_id)) else None) for run_id in runs}


def _stamp(store: Warehouse) -> dict:
    published = store.published_rollups()
    stamped = published is not None and (published / STAMP).exists()
    return json.loads((published / STAMP).read_text()) if stamped else {"basis": None, "versions": {}}


def _stamp_file(basis: str, versions: dict[str, str | None]) -> dict[str, str]:
    """The stamp, as a file to publish with the roll-ups it describes."""
    return {STAMP: json.dumps({"basis": basis, "versions": {r: v for r, v in versions.items() if v}})}


def _stamped(store: Warehouse, settings: Settings) -> dict[str, str]:
    """The version each run's stored rows were computed from, where they were computed with today's
    SQL and settings (none otherwise)."""
    stamp = _stamp(store)
    return stamp["versions"] if stamp["basis"] == _basis(settings) else {}


def current(store: Warehouse, settings: Settings, runs: Collection[str]) -> bool:
    """Whether the stored rows of `runs` were computed from their published versions, with today's
    SQL and settings (`runs` whole jobs, as job_mates gives them)."""
    stamped = _stamped(store, settings)
    return all(version is not None and stamped.get(run_id) == version for run_id, version in _versions(store, runs).items())


def job_mates(store: Warehouse, settings: Settings, runs: Collection[str]) -> set[str]:
    """`runs` and every run that shares a job with one of them.

    Only the `runs` rows of runs the stored roll-ups are not current for are read (besides
    `runs`' own); the others' jobs are in the stored `scaling`. Reading every run's file took
    0.9 ms a run, which every ingest and report paid for the whole warehouse.
    """
    published, stamped = store.published_versions(), _stamped(store, settings)
    current = sorted(run_id for run_id, version in published.items() if stamped.get(run_id) == version)
    others = set(published) - set(current) | set(runs)
    con = store.connect(settings.duckdb_config(), runs=others, tables=("runs", "scaling"))
    try:
        sql.set_variables(con, changed=sorted(runs), current_runs=current)
        return set(runs) | {run_id for (run_id,) in con.execute(_JOB_MATES).fetchall()}
    finally:
        con.close()


def recompute(con: duckdb.DuckDBPyConnection, temporary: bool = True) -> dict[str, int]:
    """Rebuild every roll-up in this session, as tables in place of the stored ones' views
    (temporary ones, or in a shared session's database)."""
    rows = {}
    for name in ROLLUP_TABLES:
        con.execute(f'DROP VIEW IF EXISTS "{name}"').fetchall()
        rows[name] = sql.materialize(con, name, temporary)
    return rows


def publish(store: Warehouse, settings: Settings) -> dict[str, int]:
    """Recompute the roll-ups over every run and replace their stored files."""
    with store.rollup_lock():
        return _rebuild(store, settings)


def _rebuild(store: Warehouse, settings: Settings) -> dict[str, int]:
    versions = store.published_versions()  # before reading: a run replaced meanwhile is then not current
    con = session(store, settings)
    try:
        recompute(con)
        return store.publish_rollups(con, files=_stamp_file(_basis(settings), versions))
    finally:
        con.close()


def update(store: Warehouse, settings: Settings, runs: Collection[str]) -> dict[str, int]:
    """Recompute the roll-up rows that `runs` change and merge them into the stored files.

    When the stored rows were computed with other SQL or settings (or none are), every run's rows
    are stale: they are all recomputed, once, which leaves every run current again, for the
    reports and for `job_mates`, which reads the `runs` rows of every run that is not.
    """
    with store.rollup_lock():
        stamp, basis = _stamp(store), _basis(settings)
        if stamp["basis"] != basis:
            return _rebuild(store, settings)
        mates = job_mates(store, settings, runs)
        versions = _versions(store, mates)
        con = session(store, settings, mates)
        try:
            recompute(con)
            return store.publish_rollups(con, mates, _stamp_file(basis, {**stamp["versions"], **versions}))
        finally:
            con.close()


def lineage() -> dict[str, list[str]]:
    """For each roll-up, the roll-ups its SQL reads: the roll-up assets' dependencies."""
    con = sql.session()
    try:
        return {name: sorted(sql.relations(con, sql.table(name).select()) & (set(ROLLUP_TABLES) - {name})) for name in ROLLUP_TABLES}
    finally:
        con.close()
