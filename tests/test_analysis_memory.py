"""The analysis's memory: while a Python step holds its arrays outside DuckDB, DuckDB holds less;
a large run's joins over every device event are built a few ranks at a time."""

from __future__ import annotations

from dataclasses import replace

from conftest import REPO, TRACES, ingest_directly

from pipelines.analysis import tables
from pipelines.settings import Settings
from pipelines.warehouse import sql
from pipelines.warehouse.store import Warehouse, tables_differ

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


def test_ranks_go_into_pieces_of_about_so_many_device_events_that_cover_every_rank():
    assert tables.pieces_of_ranks([(0, 5), (1, 5)], 10) == []
    assert tables.pieces_of_ranks([(0, 4), (1, 4), (2, 4), (3, 4)], 10) == [(-2**31, 1), (2, 2**31 - 1)]
    # a rank above the size is a piece of its own; ranks need not start at 0 nor follow each other
    assert tables.pieces_of_ranks([(2, 3), (3, 30), (7, 3), (9, 3)], 10) == [(-2**31, 2), (3, 3), (4, 2**31 - 1)]


def test_a_run_built_a_rank_at_a_time_gives_what_it_gives_built_whole(tmp_path, monkeypatch):
    run = TRACES / "hta_sampled_2rank"
    whole = Warehouse(tmp_path / "whole")
    whole.ensure()
    ingest_directly(whole, run, "sampled")

    built: dict[str, list] = {}
    original = sql.materialize

    def materialize(con, name, temporary=True, pieces=()):
        built[name] = list(pieces)
        return original(con, name, temporary, pieces)

    monkeypatch.setattr(tables, "PIECE_DEVICE_EVENTS", 1)
    monkeypatch.setattr(sql, "materialize", materialize)
    pieced = Warehouse(tmp_path / "pieced")
    pieced.ensure()
    ingest_directly(pieced, run, "sampled")

    assert {name: len(pieces) for name, pieces in built.items() if pieces} == dict.fromkeys(tables.BY_RANKS, 2)
    assert tables_differ(whole, pieced) == {}
