"""One run's trace files parsed in shards, each a Dagster step that any process sharing the
warehouse can run, write exactly the tables that one process parsing them all writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, wirespeed
from pipelines import stages
from pipelines.settings import Settings
from pipelines.testbed.bench import synth
from pipelines.warehouse.store import TABLES, Warehouse, tables_differ

RANKS = 16
RANK_BYTES = 9_600_000  # one copy of the example trace's events per rank
SHARD_MB = 40  # four rank files a shard


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    """A 16-rank run, generated from the example A100 trace, landed as the collector leaves it."""
    folder = tmp_path_factory.mktemp("landing")
    synth.generate(REPO / "examples" / "nccl_data.json.gz", folder / "ranks16", ranks=RANKS, bytes_per_rank=RANK_BYTES)
    (folder / "ranks16" / "_DONE").touch()
    return folder


def test_shards_in_processes_of_their_own_write_the_same_tables(landing, tmp_path):
    """`dagster asset materialize` runs each step in a process of its own (Dagster's multiprocess
    executor): the plan, four parse shards, the finish and the analysis. Every table equals the
    in-process `wirespeed ingest` of the same folder, and every file was parsed by one shard."""
    home, sharded = tmp_path / "dagster_home", Warehouse(tmp_path / "sharded")
    home.mkdir()
    sharded.root.mkdir()
    (sharded.root / "wirespeed.toml").write_text(f"[resources]\nshard_mb = {SHARD_MB}\n")
    env = {**os.environ, "DAGSTER_HOME": str(home), "WIRESPEED_HOME": str(sharded.root), "WIRESPEED_LANDING": str(landing)}
    subprocess.run(
        [sys.executable, "-c", "import dagster as dg; dg.DagsterInstance.get().add_dynamic_partitions('runs', ['ranks16'])"],
        env=env, check=True, capture_output=True,
    )
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "asset", "materialize", "-m", "pipelines.definitions", "--select", "group:ingest,group:analysis",
         "--partition", "ranks16"],
        cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Multiprocess executor" in result.stderr

    direct = Warehouse(tmp_path / "direct")
    wirespeed("ingest", str(landing / "ranks16"), "--warehouse", str(direct.root), "--quiet",
              env={k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"})
    assert direct.run_ids() == sharded.run_ids() == ["ranks16"]
    assert tables_differ(direct, sharded, list(TABLES)) == {}

    records = [json.loads(p.read_text()) for p in sorted((sharded.published("ranks16") / "_shards").glob("shard-*.json"))]
    assert [record["files"] for record in records] == [list(range(k, k + 4)) for k in range(0, RANKS, 4)]
    assert len({record["pid"] for record in records}) == len(records) == 4  # a process per step

    instance_events = subprocess.run(
        [sys.executable, "-c", "import dagster as dg; i = dg.DagsterInstance.get(); "
         "print(sorted(i.get_materialized_partitions(dg.AssetKey('trace_events'))))"],
        env=env, check=True, capture_output=True, text=True,
    )
    assert instance_events.stdout.strip() == "['ranks16']"


def test_a_shard_never_parsed_stops_the_finish_naming_its_files(landing, tmp_path):
    """The finish reads what every shard of the plan recorded; a shard whose step never ran (a
    worker lost) leaves its files unread, and the finish names them instead of writing a run
    without them."""
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    settings = Settings(shard_mb=SHARD_MB)
    shards = stages.plan_parse(store, settings, landing, "ranks16", "k")
    assert [len(files) for files in shards] == [4, 4, 4, 4]
    for shard, files in enumerate(shards[:3]):
        stages.parse_shard(store, settings, landing, "ranks16", "k", shard, files, None)
    with pytest.raises(stages.StageError, match="no shard parsed them") as refused:
        stages.finish_parse(store, settings, landing, "ranks16", "k", None, publish=True)
    plan = json.loads((store.staging("ranks16", "k") / "_shards" / "plan.json").read_text())
    assert all(plan["files"][index] in str(refused.value) for index in shards[3])
    assert not any(plan["files"][index] in str(refused.value) for index in shards[0])
    assert store.published("ranks16") is None
    stages.parse_shard(store, settings, landing, "ranks16", "k", 3, shards[3], None)
    outcome = stages.finish_parse(store, settings, landing, "ranks16", "k", None, publish=True)
    assert outcome.tables["ranks"]["dagster/row_count"] == RANKS


def test_shards_are_cut_by_bytes_in_file_order(tmp_path):
    """Files of 3, 3, 5 and 2 MB in shards of 6 MB: the first two, the third alone, the last."""
    run = tmp_path / "landing" / "run"
    run.mkdir(parents=True)
    for rank, megabytes in enumerate((3, 3, 5, 2)):
        (run / f"rank{rank}.pt.trace.json").write_bytes(b" " * (megabytes * 1024 * 1024))
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    assert stages.plan_parse(store, Settings(shard_mb=6), run.parent, "run", "k") == [[0, 1], [2], [3]]
    assert stages.plan_parse(store, Settings(), run.parent, "run", "k") == [[0, 1, 2, 3]]
