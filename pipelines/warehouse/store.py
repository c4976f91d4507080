"""The warehouse on disk: Parquet files per run and table, published atomically, read by DuckDB.

Layout under the warehouse root:

    versions/<run>/<version>/<table>/*.parquet   every table of one ingest of one run
    runs/<run> -> ../versions/<run>/<version>     the published version (a symlink)
    runs/_schema/<table>/empty.parquet           zero rows, so every view has a schema
    rollups/_versions/<key>/<table>/*.parquet    tables over all runs, one version per update
    rollups/current -> _versions/<key>           the published roll-ups (a symlink)
    rollups/_schema/<table>/empty.parquet        zero rows, so every roll-up view has a schema
    reports/<run>.html                           the run's report
    sources/<run>.json                           where the run's raw inputs are
    catalog.duckdb                               views over runs/*/ and rollups/*/<table>/*.parquet

Why this shape: DuckDB's file lock admits one writing process or many readers, never both, so a
warehouse kept in one DuckDB file would make an analyst's open session block scheduled ingestion.
Here ingestion never opens a DuckDB file for writing: it writes Parquet into a fresh version
directory and publishes it by replacing one symlink, which is atomic. Queries see the old version
of a run or the new one, never a mix, and never a half-written run. The catalog holds only views,
whose globs resolve at query time, so it is written once and never locked by ingestion.

The roll-ups are published the same way, all four at once, as a new version: DuckDB opens a file
more than once in a query, so a file replaced in place, even atomically, could be read torn by a
query running meanwhile in another process. The sessions this module opens read the roll-ups'
version and each run's version that were published when they opened, by their own folders.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path
from collections.abc import Collection, Iterator
from urllib.parse import quote, unquote

import duckdb

from pipelines.read.kineto.fields import MAX_PLAUSIBLE_DUR_NS
from pipelines.settings import Settings
from pipelines.warehouse import sql

# Tables written by parsing a run's raw inputs, and tables derived from them by SQL.
PARSE_TABLES = (
    "runs",
    "ranks",
    "process_groups",
    "trace_events",
    "net_samples",
    "cpu_samples",
    "nccl_comms",
    "nccl_connections",
    "nccl_calls",
    "nccl_messages",
    "nccl_tests_results",
    "fr_dumps",
    "fr_entries",
    "fr_process_groups",
    "parse_issues",
)
ANALYSIS_TABLES = (
    "steps",
    "collectives",
    "step_timeline",
    "step_breakdown",
    "step_comm_groups",
    "rank_breakdown",
    "collective_sync",
    "step_critical_path",
    "step_dependencies",
    "stream_idle",
    "collective_bw",
    "step_sync",
    "net_utilization",
    "network_summary",
    "gradient_buckets",
    "whatif_inputs",
    "whatif",
    "whatif_targets",
    "whatif_dimensions",
    "nccl_crosscheck",
    "fr_mismatches",
)
TABLES = PARSE_TABLES + ANALYSIS_TABLES
# Tables over all runs, rebuilt whole by scheduled roll-ups.
ROLLUP_TABLES = ("run_summary", "scaling", "verdict", "regressions")

SCHEMA_DIR = "_schema"
ROLLUP_VERSIONS = "_versions"  # under rollups/: each update's tables, never changed once written
# Old versions stay readable this long after being replaced, for queries that already listed them.
GRACE_SECONDS = 600
# An unpublished version untouched this long belongs to an ingest that died.
ABANDONED_SECONDS = 24 * 3600


def check_run_id(run_id: str) -> str | None:
    """Why `run_id` cannot name a run, or None when it can."""
    if not run_id or not run_id.strip():
        return "it is empty"
    if any(ord(c) < 32 or ord(c) == 127 for c in run_id):
        return "it contains control characters"
    if "..." in run_id:
        return "it contains '...', which Dagster partition keys cannot hold"
    if len(quote(run_id, safe="").encode()) > 200:
        return f"it is too long ({len(run_id)} characters)"
    return None


def run_dir_name(run_id: str) -> str:
    """A directory name for a run id that can hold any text: quotes, spaces, '../', unicode."""
    problem = check_run_id(run_id)
    if problem:
        raise ValueError(f"run id {run_id!r} cannot be used: {problem}")
    name = quote(run_id, safe="")
    name = name.replace(".", "%2E") if name.strip(".") == "" else name
    if name[0] in "._":
        name = f"%{ord(name[0]):02X}{name[1:]}"
    return name


def run_id_from_dir(name: str) -> str:
    return unquote(name)


class Warehouse:
    def __init__(self, root: Path | str):
        self.root = Path(root).absolute()
        self.runs_dir = self.root / "runs"
        self.versions_dir = self.root / "versions"
        self.reports_dir = self.root / "reports"
        self.sources_dir = self.root / "sources"
        self.rollups_dir = self.root / "rollups"
        self.catalog_path = self.root / "catalog.duckdb"

    # --- set-up -----------------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the layout, the schema-only files and the catalog if they are missing or old.

        The catalog is for analysts' own DuckDB sessions and nothing in this process reads it, so
        a new one (0.1-0.2 s of DuckDB) is written by a thread of its own, which the interpreter
        waits for before it exits.
        """
        if "'" in str(self.root):
            raise ValueError(f"the warehouse path cannot contain a single quote: {self.root}")
        for folder in (self.runs_dir, self.versions_dir, self.reports_dir, self.sources_dir, self.rollups_dir):
            folder.mkdir(parents=True, exist_ok=True)
        with self._lock("setup"):
            self._write_schema_files()
            if self._catalog_is_current():
                return
        threading.Thread(target=self._write_catalog, name="wirespeed-catalog").start()

    def _write_schema_files(self) -> None:
        """Each table's schema-only file, copied from the cache folder (written there once per
        schema and DuckDB version: writing 33 files costs a new warehouse a sixth of a second)."""
        targets = [(name, self.runs_dir / SCHEMA_DIR / name / "empty.parquet") for name in TABLES]
        targets += [(name, self.rollups_dir / SCHEMA_DIR / name / "empty.parquet") for name in ROLLUP_TABLES]
        for name, target in targets:
            stamp = target.with_suffix(".sql")
            wanted = sql.table(name).empty()
            if target.exists() and stamp.exists() and stamp.read_text() == wanted:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".tmp-{uuid.uuid4().hex}.parquet.tmp")
            temporary.write_bytes(sql.schema_only(name))
            os.replace(temporary, target)
            stamp.write_text(wanted)

    def view_sql(
        self, root_expr: str = "getvariable('wirespeed_root')", run_dirs_expr: str | None = None,
        names: tuple[str, ...] = TABLES + ROLLUP_TABLES, temporary: bool = True, rollup_dirs_expr: str | None = None,
    ) -> str:
        """CREATE VIEW statements for tables `names`: `runs/*/<table>/*.parquet`, `rollups/*/<table>/*.parquet`.

        `root_expr` is the SQL expression for the warehouse root: a session variable in the
        sessions this module opens, a literal only in the persistent catalog (a stored view
        cannot refer to a parameter). `run_dirs_expr`, a list of run folders, replaces
        `runs/*` in the per-run tables, and `rollup_dirs_expr` `rollups/*` in the roll-ups; a
        folder without the table's files adds no rows (a run from before the table existed).
        Sessions' views are temporary (see sql.session); the catalog's are not.
        """
        def under(dirs_expr: str | None, glob: str, name: str) -> str:
            if dirs_expr is None:
                return f"{root_expr} || '/{glob}/{name}/*.parquet'"
            return f"list_transform({dirs_expr}, lambda d: d || '/{name}/*.parquet'), allow_empty = true"

        sources = [(name, under(run_dirs_expr, "runs/*", name)) for name in TABLES if name in names]
        sources += [(name, under(rollup_dirs_expr, "rollups/*", name)) for name in ROLLUP_TABLES if name in names]
        return "\n".join(
            f'CREATE OR REPLACE {"TEMP " if temporary else ""}VIEW "{name}" AS SELECT * FROM read_parquet('
            f"{files}, union_by_name = true, hive_partitioning = false);"
            for name, files in sources
        )

    def _catalog_views(self) -> str:
        return self.view_sql(f"'{self.root}'", temporary=False)

    def _catalog_is_current(self) -> bool:
        stamp = self.root / "catalog.sql"
        return self.catalog_path.exists() and stamp.exists() and stamp.read_text() == self._catalog_views()

    def _write_catalog(self) -> None:
        """Build catalog.duckdb beside the old one and swap it in; readers keep their old file."""
        temporary = self.root / f".catalog-{uuid.uuid4().hex}.duckdb.tmp"
        try:
            with self._lock("setup"):
                if self._catalog_is_current():  # another process wrote it meanwhile
                    return
                wanted = self._catalog_views()
                con = duckdb.connect(str(temporary), config={"storage_compatibility_version": "v1.5.0"})
                try:
                    con.execute(wanted).fetchall()
                finally:
                    con.close()
                os.replace(temporary, self.catalog_path)
                (self.root / "catalog.sql").write_text(wanted)
        except (OSError, duckdb.Error) as problem:
            temporary.unlink(missing_ok=True)
            print(f"wirespeed: the catalog {self.catalog_path} was not written: {problem}", file=sys.stderr)

    def connect(
        self, config: dict | None = None, runs: Collection[str] | None = None,
        tables: tuple[str, ...] = TABLES + ROLLUP_TABLES, shared: sql.SharedSession | None = None,
    ) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB session with a view per table of `tables`; it takes no lock on anything.

        `config` is DuckDB's (an ingest's `Settings.duckdb_config()`; else DuckDB's defaults). With
        `runs`, the per-run tables cover those published runs only: a session whose cost does not
        grow with the warehouse. The session reads the versions published when it opened (see
        `run_variables`). Each view reads its files' schemas when it is made, so a session that
        needs few tables is quicker to open with only those. With `shared`, the views and their
        variables are for every connection to that shared session, and this is one of them.
        """
        variables = {"wirespeed_root": str(self.root), **self.run_variables(runs), **self.rollup_variables()}
        if shared is None:
            con = sql.session(config)
            sql.set_variables(con, **variables)
        else:
            con = shared.connect()
            shared.set_variables(**variables)
            shared.sync(con)
        views = self.view_sql(run_dirs_expr="getvariable('run_dirs')", names=tables, temporary=shared is None,
                              rollup_dirs_expr="getvariable('rollup_dirs')")
        con.execute(views).fetchall()
        return con

    def run_variables(self, runs: Collection[str] | None = None) -> dict:
        """What a session's per-run views read (`run_dirs`): the schema folder and the version of
        each published run (of `runs`, else of all) published now, by its own folder. So the
        session keeps reading those versions while a run is ingested again: its queries agree with
        each other, and a file is never replaced under a query that opens it twice. With `runs`,
        only their links are read, so the cost does not grow with the warehouse."""
        if runs is None:
            folders = [self.versions_dir / run_dir_name(r) / v for r, v in sorted(self.published_versions().items())]
        else:
            folders = [folder for folder in map(self.published, sorted(set(runs))) if folder is not None]
        return {"run_dirs": [str(folder) for folder in [self.runs_dir / SCHEMA_DIR, *folders]]}

    def published_rollups(self) -> Path | None:
        """The published roll-ups' version folder."""
        link = self.rollups_dir / "current"
        return link.resolve() if link.exists() else None

    def rollup_variables(self) -> dict:
        """What a session's roll-up views read (`rollup_dirs`): the schema folder and the version
        published now, by its own folder, so that the session keeps reading that version while an
        update publishes another."""
        published = self.published_rollups()
        return {"rollup_dirs": [str(self.rollups_dir / SCHEMA_DIR)] + ([str(published)] if published else [])}

    # --- runs and versions ------------------------------------------------------------------

    def published(self, run_id: str) -> Path | None:
        link = self.runs_dir / run_dir_name(run_id)
        return link.resolve() if link.exists() else None

    def run_ids(self) -> list[str]:
        return sorted(self.published_versions())

    def published_versions(self) -> dict[str, str]:
        """Each published run's version folder name, from its link alone (no file of it is read).
        A run's folder name never starts with "." or "_" (`run_dir_name`): those are the schema
        folder and links being published."""
        return {
            run_id_from_dir(entry.name): os.path.basename(os.readlink(entry.path))
            for entry in os.scandir(self.runs_dir) if entry.name[0] not in "._" and entry.is_symlink()
        }

    def staging(self, run_id: str, key: str) -> Path:
        """The version directory an ingest identified by `key` (e.g. a Dagster run id) writes into."""
        return self.versions_dir / run_dir_name(run_id) / f"v-{_safe_key(key)}"

    def start_version(self, run_id: str, key: str, carry_tables: tuple[str, ...]) -> Path:
        """Create (once per key) a staging version holding links to `carry_tables` of the published one."""
        target = self.staging(run_id, key)
        if target.exists():
            return target
        building = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        building.mkdir(parents=True)
        current = self.published(run_id)
        for name in carry_tables:
            source = current / name if current else None
            if source is None or not source.is_dir():
                continue
            (building / name).mkdir()
            for part in source.iterdir():
                _link_or_copy(part, building / name / part.name)
        try:
            building.rename(target)
        except OSError:
            shutil.rmtree(building, ignore_errors=True)  # another step of the same ingest won
        return target

    def table_dir(self, version: Path, name: str) -> Path:
        """Empty the table's folder in a staging version and return it, ready for new parts."""
        folder = version / name
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        return folder

    def publish(self, run_id: str, version: Path) -> None:
        """Make `version` the run's published version in one atomic rename."""
        with self._lock(f"publish-{run_dir_name(run_id)}"):
            _publish(self.runs_dir / run_dir_name(run_id), version)

    def publish_rollups(
        self, con: duckdb.DuckDBPyConnection, runs: Collection[str] | None = None, files: dict[str, str] | None = None,
    ) -> dict[str, int]:
        """Write every roll-up table built in session `con`, and `files` (name: text), into a new
        version and publish it in one atomic rename; call it under `rollup_lock`.

        With `runs`, the session's tables hold only those runs' rows: they replace the published
        rows of those runs, and the published rows of every other run are kept. Returns the rows
        written per table.
        """
        version = self.rollups_dir / ROLLUP_VERSIONS / uuid.uuid4().hex
        stored = self.rollup_variables()["rollup_dirs"]
        rows = {}
        for name in ROLLUP_TABLES:
            (version / name).mkdir(parents=True)
            merged = f'SELECT * FROM "{name}"'
            if runs is not None:
                sql.set_variables(con, stored_rollup=[f"{folder}/{name}/*.parquet" for folder in stored], replaced_runs=sorted(runs))
                merged += (
                    " UNION ALL BY NAME SELECT * FROM read_parquet(getvariable('stored_rollup'), union_by_name = true)"
                    " WHERE NOT list_contains(getvariable('replaced_runs'), run_id)"
                )
            rows[name] = sql.write_parquet(con, f"({merged})", version / name / "part-0.parquet")
        for file_name, text in (files or {}).items():
            (version / file_name).write_text(text)
        _publish(self.rollups_dir / "current", version)
        self._drop_unversioned_rollups()
        return rows

    def _drop_unversioned_rollups(self) -> None:
        """Delete the roll-ups a warehouse kept before they were versioned (`rollups/<table>/`,
        `rollups/stamp.json`), once GRACE_SECONDS old: nothing reads them since, and an analyst
        opening those files would find rows that no longer change."""
        for path in [*(self.rollups_dir / name for name in ROLLUP_TABLES), self.rollups_dir / "stamp.json"]:
            if not path.exists() or time.time() - path.stat().st_mtime <= GRACE_SECONDS:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    @contextlib.contextmanager
    def rollup_lock(self) -> Iterator[None]:
        """Held while the roll-ups are read, recomputed and replaced, so no update is lost."""
        with self._lock("rollups"):
            yield

    # --- sources and reports ----------------------------------------------------------------

    def register_source(self, run_id: str, path: Path, overrides: dict | None = None) -> None:
        """Remember where a run's raw inputs are (and values given for it), for ingests that only know its id."""
        target = self.sources_dir / f"{run_dir_name(run_id)}.json"
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
        entry = {"run_id": run_id, "path": str(Path(path).absolute()), "overrides": overrides or {}}
        temporary.write_text(json.dumps(entry))
        os.replace(temporary, target)

    def source_of(self, run_id: str) -> tuple[Path, dict] | None:
        """The registered path of a run's raw inputs and the overrides given with it, if registered."""
        target = self.sources_dir / f"{run_dir_name(run_id)}.json"
        if not target.exists():
            return None
        entry = json.loads(target.read_text())
        return Path(entry["path"]), entry.get("overrides", {})

    def report_path(self, run_id: str) -> Path:
        return self.reports_dir / f"{run_dir_name(run_id)}.html"

    @contextlib.contextmanager
    def _lock(self, name: str) -> Iterator[None]:
        lock_dir = self.root / ".locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        with open(lock_dir / name, "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _publish(link: Path, version: Path) -> None:
    """Point `link` at `version` in one atomic rename, then delete the versions beside it that were
    replaced over GRACE_SECONDS ago (the one replaced now starts its grace period: a query may have
    resolved the link to it) or left unpublished for ABANDONED_SECONDS (an ingest that died)."""
    (version / "_PUBLISHED").touch()
    replaced = link.resolve() if link.exists() else None
    temporary = link.with_name(f".link-{uuid.uuid4().hex}")
    os.symlink(os.path.relpath(version, link.parent), temporary)
    os.replace(temporary, link)
    if replaced is not None and replaced != version:
        os.utime(replaced)
    now = time.time()
    for other in version.parent.iterdir():
        if other == version:
            continue
        age = now - other.stat().st_mtime
        if ((other / "_PUBLISHED").exists() and age > GRACE_SECONDS) or age > ABANDONED_SECONDS:
            shutil.rmtree(other, ignore_errors=True)


def _safe_key(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in key)[:80]


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def open_version(
    version: Path, settings: Settings, run_id: str, tables: tuple[str, ...] = PARSE_TABLES
) -> duckdb.DuckDBPyConnection:
    """A session with a view per table in `tables`, reading one version of one run, and the
    shared macros."""
    con = sql.session(settings.duckdb_config())
    sql.set_variables(con, **version_variables(version, settings, run_id))
    for name in tables:
        create_version_view(con, name)
    sql.use_macros(con)
    return con


def version_variables(version: Path, settings: Settings, run_id: str) -> dict:
    """The session variables of a session over one version of one run: the run, the version's
    folder (its views read it) and what the analysis SQL takes from the settings."""
    return {
        "run_id": run_id,
        "version_dir": str(version),
        "comm_pattern": settings.comm_regex(),
        "max_dur_ns": MAX_PLAUSIBLE_DUR_NS,
        "dimension_keys": [key for key, _ in settings.dimensions],
        "dimension_values": [value for _, value in settings.dimensions],
        "step_annotation": settings.step_annotation,
    }


def create_version_view(con: duckdb.DuckDBPyConnection, name: str, temporary: bool = True) -> None:
    """A view of table `name` over its Parquet files in the session's version (in the
    connection's database, for every connection to it, with `temporary` False)."""
    con.execute(
        f'CREATE OR REPLACE {"TEMP " if temporary else ""}VIEW "{name}" AS SELECT * FROM read_parquet('
        f"getvariable('version_dir') || '/{name}/*.parquet', union_by_name = true)"
    ).fetchall()


# Columns that say when or how fast an ingest ran, not what it found.
TIMING_COLUMNS = {"runs": ["ingested_at_ns"], "ranks": ["parse_seconds"], "run_summary": ["ingested_at_ns"]}


def tables_differ(first: Warehouse, second: Warehouse, tables: list[str] | None = None, runs: list[str] | None = None) -> dict[str, str]:
    """Per table whose rows differ between two warehouses (EXCEPT ALL both ways; `runs` only, when
    given), how many: timing columns left out, doubles to 12 significant digits, since DuckDB sums
    in parallel and a sum's last bits vary from one ingest to the next."""
    differing = {}
    con = first.connect()
    try:
        con.execute("SET VARIABLE other_root = ?", [str(second.root)]).fetchall()
        con.execute("SET VARIABLE compared_runs = ?", [runs]).fetchall()
        chosen = "WHERE getvariable('compared_runs') IS NULL OR list_contains(getvariable('compared_runs'), run_id)"
        for name in tables or TABLES + ROLLUP_TABLES:
            columns = []
            for column in sql.table(name).columns:
                if column.name in TIMING_COLUMNS.get(name, []):
                    continue
                quoted = f'"{column.name}"'
                if column.type == "DOUBLE":
                    quoted = (f"CASE WHEN {quoted} = 0 OR NOT isfinite({quoted}) THEN {quoted} "
                              f"ELSE round({quoted}, 11 - CAST(floor(log10(abs({quoted}))) AS INTEGER)) END")
                columns.append(quoted)
            listed = ", ".join(columns)
            folder = "rollups/*" if name in ROLLUP_TABLES else "runs/*"
            other = (f"read_parquet(getvariable('other_root') || '/{folder}/{name}/*.parquet', "
                     "union_by_name = true, hive_partitioning = false)")
            mine, theirs = f'SELECT {listed} FROM "{name}" {chosen}', f"SELECT {listed} FROM {other} {chosen}"
            (count,) = con.execute(f"SELECT count(*) FROM ({mine})").fetchall()[0]
            (differ,) = con.execute(f"SELECT count(*) FROM (({mine} EXCEPT ALL {theirs}) UNION ALL ({theirs} EXCEPT ALL {mine}))").fetchall()[0]
            if differ:
                differing[name] = f"{differ} of {count} rows"
    finally:
        con.close()
    return differing
