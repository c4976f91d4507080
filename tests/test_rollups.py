"""Roll-ups updated for the runs just ingested hold exactly what a whole rebuild computes, and a
report reads the stored ones only while their stamp says they are current."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from conftest import TRACES, ingest_directly
from pipelines import checks
from pipelines.commands.ingest import ingest_paths
from pipelines.report import report_run
from pipelines.settings import Settings
from pipelines.warehouse import rollups
from pipelines.warehouse.store import ROLLUP_TABLES, TABLES, Warehouse, open_version

SINGLE = TRACES / "hta_single_rank_of_multirank"


def _run_folder(root: Path, run_id: str, trace: Path, job: str | None) -> Path:
    folder = root / run_id
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "traces").mkdir(parents=True)
    shutil.copy(trace, folder / "traces" / trace.name)
    (folder / "manifest.json").write_text(json.dumps({"run_id": run_id, **({"job": job} if job else {})}))
    return folder


def _differences(store: Warehouse) -> dict[str, int]:
    """Per roll-up, the rows in which the stored table and a whole recomputation differ."""
    con = rollups.session(store, Settings())
    try:
        rollups.recompute(con)
        differ = {}
        for name in ROLLUP_TABLES:
            con.execute("SET VARIABLE stored = ?", [[f"{folder}/{name}/*.parquet" for folder in store.rollup_variables()["rollup_dirs"]]]).fetchall()
            stored = "SELECT * FROM read_parquet(getvariable('stored'), union_by_name = true)"
            fresh = f'SELECT * FROM "{name}"'
            query = f"SELECT count(*) FROM (({stored} EXCEPT ALL {fresh}) UNION ALL ({fresh} EXCEPT ALL {stored}))"
            differ[name] = con.execute(query).fetchall()[0][0]
        return differ
    finally:
        con.close()


def test_updated_rollups_match_a_whole_rebuild(tmp_path):
    """Runs join a job one ingest at a time, then one moves to another job: after each ingest the
    stored roll-ups, updated for that run and its job mates only, equal a rebuild over all runs."""
    store = Warehouse(tmp_path / "warehouse")
    landing = tmp_path / "landing"
    small, other, third = (SINGLE / n for n in (
        "df_index_resolver_rank1_of2.json.gz", "trace_diff_test_rank1_of2.json.gz", "trace_diff_control_rank3_of8.json.gz"
    ))
    steps = [("a", small, "j1"), ("b", other, "j1"), ("c", third, None), ("b", other, "j2")]
    for run_id, trace, job in steps:
        (result,) = ingest_paths([_run_folder(landing, run_id, trace, job)], store.root, progress=False)
        assert result.success, result.error
        assert _differences(store) == dict.fromkeys(ROLLUP_TABLES, 0), (run_id, job)
        assert rollups.current(store, Settings(), rollups.job_mates(store, Settings(), [run_id])), run_id
    con = store.connect()
    try:
        jobs = dict(con.execute("SELECT run_id, job_runs FROM scaling").fetchall())
    finally:
        con.close()
    assert jobs == {"a": 1, "b": 1, "c": 1}  # a's job lost b, so its row was recomputed too


def test_a_report_written_while_the_rollups_update_reads_them_updated(tmp_path, monkeypatch):
    """An ingest writes its report while the roll-ups update for the run; the queries that read
    them wait for the update, even a slow one: the page is the one written from the stored rows
    afterwards, with the run in its job's verdict and scaling."""
    store = Warehouse(tmp_path / "warehouse")
    landing = tmp_path / "landing"
    small, other = (SINGLE / n for n in ("df_index_resolver_rank1_of2.json.gz", "trace_diff_test_rank1_of2.json.gz"))
    (first,) = ingest_paths([_run_folder(landing, "a", small, "j1")], store.root, progress=False)
    assert first.success, first.error

    real = rollups.update
    monkeypatch.setattr(rollups, "update", lambda *args: time.sleep(2) or real(*args))
    (second,) = ingest_paths([_run_folder(landing, "b", other, "j1")], store.root, progress=False)
    assert second.success, second.error
    assert rollups.current(Warehouse(store.root), Settings(), {"a", "b"})
    written = second.report.read_text()
    assert written == report_run(store, Settings(), "b", tmp_path / "again.html").read_text()


def test_a_session_keeps_reading_the_rollups_it_opened_on_while_an_update_publishes_others(tmp_path):
    """DuckDB opens a file more than once in a query, so a roll-up file replaced in place, even
    atomically, could be read torn by a query in another process (a batch failed so, reading
    `verdict` while another worker's batch updated the roll-ups). An update publishes a new version
    instead and leaves every file of the one before as it was: a session opened before the update
    keeps reading the version it opened on, and one opened after it reads the new one."""
    store = Warehouse(tmp_path / "warehouse")
    landing = tmp_path / "landing"
    small, other = (SINGLE / n for n in ("df_index_resolver_rank1_of2.json.gz", "trace_diff_test_rank1_of2.json.gz"))
    (first,) = ingest_paths([_run_folder(landing, "a", small, "j1")], store.root, progress=False)
    assert first.success, first.error
    before = store.connect(tables=ROLLUP_TABLES)
    read = [path for folder in store.rollup_variables()["rollup_dirs"] for path in Path(folder).rglob("*.parquet")]
    files = {path: (path.stat().st_ino, path.read_bytes()) for path in read}
    assert any(path.name == "part-0.parquet" for path in files)

    (second,) = ingest_paths([_run_folder(landing, "b", other, "j1")], store.root, progress=False)
    assert second.success, second.error
    after = store.connect(tables=ROLLUP_TABLES)
    try:
        assert {path: (path.stat().st_ino, path.read_bytes()) for path in files} == files
        assert before.execute("SELECT list(run_id ORDER BY run_id) FROM scaling").fetchall() == [(["a"],)]
        assert after.execute("SELECT list(run_id ORDER BY run_id) FROM scaling").fetchall() == [(["a", "b"],)]
    finally:
        before.close()
        after.close()


def test_a_report_reads_stored_rollups_and_verdicts_only_while_current(tmp_path, monkeypatch):
    """The stored roll-ups serve a report while their stamp matches the runs' published versions,
    the SQL and the settings; the same report recomputed live is the same page. The verdicts a
    version keeps are those its tables give when judged again."""
    store = Warehouse(tmp_path / "warehouse")
    landing = tmp_path / "landing"
    small, other = (SINGLE / n for n in ("df_index_resolver_rank1_of2.json.gz", "trace_diff_test_rank1_of2.json.gz"))
    for run_id, trace in (("a", small), ("b", other)):
        (result,) = ingest_paths([_run_folder(landing, run_id, trace, "j1")], store.root, progress=False)
        assert result.success, result.error
    settings, mates = Settings(), {"a", "b"}
    assert rollups.job_mates(store, settings, ["a"]) == mates and rollups.current(store, settings, mates)

    recomputed = []
    real = rollups.recompute
    monkeypatch.setattr(rollups, "recompute", lambda *args, **kwargs: recomputed.append(1) or real(*args, **kwargs))
    stored_page = report_run(store, settings, "a", tmp_path / "stored.html").read_text()
    assert recomputed == []
    (store.published_rollups() / rollups.STAMP).rename(tmp_path / "stamp.json")
    assert not rollups.current(store, settings, mates)
    live_page = report_run(store, settings, "a", tmp_path / "live.html").read_text()
    assert recomputed == [1] and live_page == stored_page
    (tmp_path / "stamp.json").rename(store.published_rollups() / rollups.STAMP)

    stricter = Settings(verdict={**settings.verdict, "exposed_share_min": 0.5})
    assert not rollups.current(store, stricter, mates)  # the thresholds changed
    ingest_directly(store, _run_folder(landing, "b", other, "j1"), "b", key="again")  # published, no update
    assert not rollups.current(store, settings, mates) and rollups.current(store, settings, {"c"}) is False

    version = store.published("a")
    con = open_version(version, settings, "a", TABLES)
    try:
        judged = [checks.judge(check, con) for check in checks.PARSE_CHECKS + checks.ANALYSIS_CHECKS]
    finally:
        con.close()
    assert checks.kept(version) == judged


def test_job_mates_read_only_the_runs_the_stored_rollups_are_not_current_for(tmp_path):
    """A run the stored roll-ups are current for is found by its stored `scaling` row, without its
    own `runs` file (here made unreadable), so finding mates does not grow with the warehouse; a
    run published since, with no update, is found by its `runs` row. An update under new
    thresholds recomputes every run's rows, so that every run is current again."""
    store = Warehouse(tmp_path / "warehouse")
    landing = tmp_path / "landing"
    small, other, third = (SINGLE / n for n in (
        "df_index_resolver_rank1_of2.json.gz", "trace_diff_test_rank1_of2.json.gz", "trace_diff_control_rank3_of8.json.gz"
    ))
    for run_id, trace, job in (("a", small, "j1"), ("b", other, "j1"), ("c", third, "j2")):
        (result,) = ingest_paths([_run_folder(landing, run_id, trace, job)], store.root, progress=False)
        assert result.success, result.error
    settings = Settings()
    assert set(store.published_versions()) == {"a", "b", "c"}
    kept = {}
    for run_id in ("b", "c"):
        (part,) = (store.published(run_id) / "runs").glob("*.parquet")
        kept[part] = part.read_bytes()
        part.unlink()  # not written through: it may be a link to another version's file
        part.write_bytes(b"not parquet")
    assert rollups.job_mates(store, settings, ["a"]) == {"a", "b"}

    ingest_directly(store, _run_folder(landing, "d", third, "j1"), "d")  # published, no update
    assert rollups.job_mates(store, settings, ["a"]) == {"a", "b", "d"}
    assert rollups.job_mates(store, settings, ["d"]) == {"a", "b", "d"}

    for part, data in kept.items():
        part.write_bytes(data)
    stricter = Settings(verdict={**settings.verdict, "exposed_share_min": 0.5})
    rollups.update(store, stricter, ["d"])
    assert rollups.current(store, stricter, {"a", "b", "c", "d"})
