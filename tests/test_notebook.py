"""`open_warehouse`: the warehouse as polars frames, read-only and safe beside a running ingest."""

from __future__ import annotations

import subprocess
import sys

import polars as pl
import pytest

from conftest import REPO, SHARED, wirespeed
from pipelines import open_warehouse

LOGS = SHARED / "nccl_logs"
ONE_LOG = LOGS / "nccl-584-2.7-sendrecv-coll.log"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("notebook") / "warehouse"
    wirespeed("ingest", str(LOGS), "--warehouse", str(root), "--quiet")
    wirespeed("ingest", str(ONE_LOG), "--warehouse", str(root), "--quiet")
    return root


def test_runs_tables_and_sql(warehouse):
    w = open_warehouse(warehouse)
    runs = w.runs()
    assert isinstance(runs, pl.DataFrame) and runs["run_id"].to_list() == ["nccl-584-2.7-sendrecv-coll", "nccl_logs"]
    calls = w.table("nccl_calls", run="nccl_logs")
    assert isinstance(calls, pl.LazyFrame)
    assert calls.select(pl.len()).collect().item() == 14
    assert w.table("nccl_calls", run=["nccl-584-2.7-sendrecv-coll"]).collect().height == 7
    assert w.table("nccl_calls").collect().height == 21
    # Types as the table's SQL documents them, also for a table no run of this warehouse has rows in.
    assert w.table("nccl_calls").collect_schema()["seq"] == pl.Int64
    assert w.table("steps").collect().height == 0 and w.table("steps").collect_schema()["start_ns"] == pl.Int64
    by_op = w.sql("SELECT op, count(*) AS calls FROM nccl_calls WHERE run_id = 'nccl_logs' GROUP BY op ORDER BY op")
    assert isinstance(by_op, pl.DataFrame)
    mine = calls.group_by("op").agg(pl.len().cast(pl.Int64).alias("calls")).sort("op").collect()
    assert by_op.equals(mine)


def test_default_path_and_errors(warehouse, monkeypatch, tmp_path):
    monkeypatch.setenv("WIRESPEED_HOME", str(warehouse))
    assert open_warehouse().runs().height == 2
    with pytest.raises(FileNotFoundError, match="no warehouse"):
        open_warehouse(tmp_path / "nothing")
    w = open_warehouse(warehouse)
    with pytest.raises(LookupError, match="'missing'"):
        w.table("nccl_calls", run="missing")
    with pytest.raises(ValueError, match="no table 'calls'"):
        w.table("calls")
    with pytest.raises(ValueError, match="the query failed"):
        w.sql("SELECT nothing FROM nccl_calls")


def test_reads_published_versions_beside_an_ingest(warehouse):
    w = open_warehouse(warehouse)
    before = w.table("nccl_calls", run="nccl_logs")
    ingest = subprocess.Popen(
        [sys.executable, "-m", "pipelines.commands.cli", "ingest", str(LOGS), "--warehouse", str(warehouse), "--quiet"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    reads = 0
    try:
        while ingest.poll() is None:
            assert w.table("nccl_calls", run="nccl_logs").collect().height == 14
            assert w.sql("SELECT count(*) AS n FROM nccl_calls WHERE run_id = 'nccl_logs'")["n"].item() == 14
            assert w.runs().height == 2
            reads += 1
    finally:
        ingest.wait(timeout=300)
    assert ingest.returncode == 0, ingest.stderr.read()
    assert reads > 0
    # A frame made before the ingest published keeps reading the version it was made over.
    assert before.collect().height == 14
    assert w.table("nccl_calls", run="nccl_logs").collect().height == 14
