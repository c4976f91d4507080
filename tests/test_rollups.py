"""Roll-ups updated for the runs just ingested hold exactly what a whole rebuild computes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import TRACES
from pipelines import rollups
from pipelines.materialize import ingest_paths
from pipelines.settings import Settings
from pipelines.warehouse import ROLLUP_TABLES, Warehouse

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
            con.execute("SET VARIABLE stored = ?", [str(store.rollups_dir / name / "*.parquet")]).fetchall()
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
    con = store.connect()
    try:
        jobs = dict(con.execute("SELECT run_id, job_runs FROM scaling").fetchall())
    finally:
        con.close()
    assert jobs == {"a": 1, "b": 1, "c": 1}  # a's job lost b, so its row was recomputed too
