"""Which process group a step waits for: exposure shared out exactly, and each group's dimension."""

from __future__ import annotations

import pytest

from conftest import ingest_directly, table_rows as rows
from pipelines.settings import Settings
from pipelines.warehouse.store import Warehouse
from synthetic import Kernel, Rank, write_run

IDENTITY = """
SELECT b.run_id, b.rank, b.step, b.exposed_comm_ns, coalesce(sum(g.exposed_comm_ns), 0) AS attributed_ns
FROM step_breakdown AS b
LEFT JOIN step_comm_groups AS g USING (run_id, rank, step)
GROUP BY ALL
HAVING b.exposed_comm_ns <> attributed_ns
"""



def allreduce(start_us: float, dur_us: float, pg: str, desc: str, stream: int) -> Kernel:
    return Kernel(start_us, dur_us, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "allreduce", 250_000,
                  group_size=2, pg=pg, pg_desc=desc, stream=stream)


def ingest(tmp_path, kernels: list[Kernel], settings: Settings | None = None) -> Warehouse:
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    run = write_run(tmp_path / "run", [Rank(0, "host-a", [(1, 0, 2000)], kernels)], 1)
    ingest_directly(store, run, "groups", settings=settings)
    return store


def test_exposure_is_shared_among_the_groups_communicating_then(tmp_path):
    # Compute 0-400 us and 800-1000 us; tp alone 400-500, tp and dp 500-600, dp alone 600-800,
    # three groups for 1 us at 900 while compute runs (overlapped: nobody's exposure).
    store = ingest(tmp_path, [
        Kernel(0, 400), Kernel(800, 200),
        allreduce(400, 200, "1", "mesh_tp", 41),
        allreduce(500, 300, "2", "mesh_dp_replicate", 42),
        allreduce(900, 1, "3", "mesh_cp", 43),
    ])
    found = {r["pg"]: r for r in rows(store, "SELECT * FROM step_comm_groups")}
    assert {pg: (r["dimension"], r["exposed_comm_ns"]) for pg, r in found.items()} == {
        "1": ("tp", 150_000), "2": ("dp", 250_000), "3": ("cp", 0),
    }
    assert found["1"]["comm_ns"] == 200_000 and found["1"]["collectives"] == 1 and found["1"]["bytes"] == 1_000_000
    # 2(n-1)/n = 1 for n = 2: 8 bits * 1 MB / 200 us.
    assert found["1"]["busbw_gbps"] == pytest.approx(40.0)
    assert rows(store, IDENTITY) == []


def test_three_way_split_adds_up_to_the_nanosecond(tmp_path):
    # 1 us exposed, shared by three groups: 333 + 333 + 334 ns.
    store = ingest(tmp_path, [
        Kernel(0, 400),
        allreduce(400, 1, "1", "mesh_tp", 41), allreduce(400, 1, "2", "mesh_pp", 42), allreduce(400, 1, "3", "mesh_ep", 43),
    ])
    shares = sorted(r["exposed_comm_ns"] for r in rows(store, "SELECT * FROM step_comm_groups"))
    assert shares == [333, 333, 334]
    assert rows(store, IDENTITY) == []


@pytest.mark.parametrize(("desc", "dimension"), [
    ("mesh_dp_shard", "fsdp"), ("dp_shard_cp", "fsdp"), ("mesh_tp", "tp"), ("TENSOR_MODEL_PARALLEL_GROUP", "tp"),
    ("EXPERT_TENSOR_PARALLEL_GROUP", "tp"), ("PIPELINE_MODEL_PARALLEL_GROUP", "pp"), ("DATA_PARALLEL_GROUP", "dp"),
    ("DATA_PARALLEL_GROUP_WITH_CP", "dp"), ("EXPERT_DATA_PARALLEL_GROUP", "dp"), ("mesh_dp_replicate", "dp"),
    ("CONTEXT_PARALLEL_GROUP", "cp"), ("mesh_cp", "cp"), ("EXPERT_MODEL_PARALLEL_GROUP", "ep"), ("mesh_ep", "ep"),
])
def test_dimension_from_the_group_description(tmp_path, desc, dimension):
    store = ingest(tmp_path, [Kernel(0, 400), allreduce(400, 100, "5", desc, 41)])
    (row,) = rows(store, "SELECT dimension, dimension_source, pg_desc FROM step_comm_groups")
    assert row == {"dimension": dimension, "dimension_source": "name", "pg_desc": desc}


def test_user_override_wins_by_description_or_name(tmp_path):
    settings = Settings(dimensions=(("mesh_tp", "ep"), ("2", "pp")))
    store = ingest(tmp_path, [
        Kernel(0, 400), allreduce(400, 100, "1", "mesh_tp", 41), allreduce(600, 100, "2", "mesh_dp", 42),
    ], settings)
    found = {r["pg"]: (r["dimension"], r["dimension_source"]) for r in rows(store, "SELECT * FROM step_comm_groups")}
    assert found == {"1": ("ep", "override"), "2": ("pp", "override")}


def test_wirespeed_toml_dimensions_are_checked(tmp_path):
    from pipelines import settings

    (tmp_path / "wirespeed.toml").write_text('[dimensions]\n"mesh_x" = "tp"\n"9" = "pipeline"\n')
    with pytest.raises(ValueError, match="'pipeline' is not one of"):
        settings.load(tmp_path)
    (tmp_path / "wirespeed.toml").write_text('[dimensions]\n"mesh_x" = "tp"\n')
    assert settings.load(tmp_path).dimensions == (("mesh_x", "tp"),)


def test_identity_holds_on_every_shared_trace(shared_warehouse):
    assert rows(shared_warehouse, IDENTITY) == []
    runs = rows(shared_warehouse, "SELECT run_id, sum(exposed_comm_ns) AS ns FROM step_comm_groups GROUP BY ALL")
    assert len(runs) >= 5 and sum(r["ns"] for r in runs) > 0


def test_live_ddp_run_waits_for_its_data_parallel_group(gloo_run, tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, gloo_run, "ddp")
    assert rows(store, IDENTITY) == []
    groups = rows(store, "SELECT pg_desc, dimension, dimension_source, sum(exposed_comm_ns) AS ns FROM step_comm_groups "
                         "WHERE pg IS NOT NULL GROUP BY ALL")
    assert [(g["pg_desc"], g["dimension"], g["dimension_source"]) for g in groups] == [("default_pg", "dp", "ops")]
    assert groups[0]["ns"] > 0
