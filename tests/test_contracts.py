"""The SQL files' headers are contracts: every file parses, the docs match them, the data obeys them."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from pipelines.analysis.tables import BUILD_ORDER
from pipelines.read.kineto.fields import ARG_KEYS
from pipelines.warehouse import sql
from pipelines.warehouse.schema_doc import schema_markdown
from pipelines.warehouse.store import ANALYSIS_TABLES, ROLLUP_TABLES, TABLES

ALL_TABLES = TABLES + ROLLUP_TABLES + tuple(n for n in BUILD_ORDER if n.startswith("_"))


@pytest.mark.parametrize("name", ALL_TABLES)
def test_every_table_file_has_a_contract(name):
    table = sql.table(name)
    assert table.summary and table.explanation and table.grain.startswith("one row per")
    names = [c.name for c in table.columns]
    assert len(names) == len(set(names)) and all(c.doc for c in table.columns)
    # Units in names: anything measured in time is in integer nanoseconds.
    for column in table.columns:
        if column.name.endswith("_ns"):
            assert column.type == "BIGINT", (name, column.name)


def test_schema_doc_is_current():
    assert (REPO / "docs" / "schema.md").read_text() == schema_markdown(), "run: python -m pipelines.warehouse.schema_doc > docs/schema.md"


def test_every_arg_key_read_is_used():
    text = sql.table("trace_events").query
    for key in ARG_KEYS:
        assert re.search(rf'args\.("{re.escape(key)}"|{re.escape(key)}\b)', text), key


def test_published_tables_have_their_documented_columns(shared_warehouse):
    con = shared_warehouse.connect()
    try:
        for name in TABLES + ROLLUP_TABLES:
            described = [(c.name, c.type) for c in sql.table(name).columns]
            actual = [(row[0], row[1]) for row in con.execute(f'DESCRIBE "{name}"').fetchall()]
            assert actual == described, name
    finally:
        con.close()


def test_analysis_builds_every_published_table():
    assert set(ANALYSIS_TABLES) <= set(BUILD_ORDER)


def test_tables_are_empty_without_what_their_headers_say(shared_warehouse):
    """Each `Empty without` names tables its query reads, and the query itself, run over the
    shared traces (which have none of those rows), returns no rows either: the shortcut the
    runner takes gives what the query would."""
    declared = {name: sql.table(name).empty_without for name in ALL_TABLES if sql.table(name).empty_without}
    assert {"_fr_groups", "fr_mismatches", "network_summary"} <= set(declared)
    con = shared_warehouse.connect()
    try:
        sql.use_macros(con)
        read = set().union(*(sql.tables_read([sql.table(name).query], ALL_TABLES) for name in declared))
        for name in (n for n in BUILD_ORDER if n.startswith("_") and n in read):  # intermediates the others read
            con.execute(f'CREATE TEMP TABLE "{name}" AS {sql.table(name).select()}').fetchall()
        for name, needed in declared.items():
            assert set(needed) <= set(sql.tables_read([sql.table(name).query], ALL_TABLES)), name
            assert all(con.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] == 0 for t in needed), name
            assert con.execute(f"SELECT count(*) FROM ({sql.table(name).select()})").fetchall()[0][0] == 0, name
            assert sql.build_query(con, name) == sql.table(name).empty()
    finally:
        con.close()
