"""The analysis's memory: while a Python step holds its arrays outside DuckDB, DuckDB holds less."""

from __future__ import annotations

from dataclasses import replace

from conftest import REPO, ingest_directly

from pipelines.analysis import tables
from pipelines.settings import Settings
from pipelines.warehouse import sql
from pipelines.warehouse.store import Warehouse

RUN = REPO / "examples" / "nccl_data.json.gz"


def _limit_mb(con) -> float:
    ((limit,),) = con.execute("SELECT current_setting('memory_limit')").fetchall()
    number, unit = limit.split()
    return float(number) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit] * 2**20 / 10**6


def test_python_steps_run_with_part_of_duckdbs_memory_lent_to_them(tmp_path, monkeypatch):
    settings = Settings(memory_mb=500)
    seen: dict[str, float] = {}

    def probed_step(name, step):
        def build(con, settings):
            seen[name] = _limit_mb(con)
            return step.build(con, settings)
        return replace(step, build=build)

    original_publish = tables._publish

    def publish(con, name, folder):
        seen[name] = _limit_mb(con)  # a streamed table's rows are made in Python as it is written
        return original_publish(con, name, folder)

    monkeypatch.setattr(tables, "PYTHON_STEPS", {n: probed_step(n, s) for n, s in tables.PYTHON_STEPS.items()})
    monkeypatch.setattr(tables, "_publish", publish)
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, RUN, settings=settings)

    lent = 500 * (1 - tables.PYTHON_STEP_SHARE)
    steps = set(tables.PYTHON_STEPS) | set(tables.PYTHON_STREAMS)
    assert steps <= set(seen)
    assert all(abs(seen[name] - lent) < 1 for name in steps), seen
    con = sql.session(settings.duckdb_config())  # the same database, its whole limit back
    try:
        assert abs(_limit_mb(con) - 500) < 1
    finally:
        con.close()
