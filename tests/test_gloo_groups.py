"""Which process group each gloo collective ran in: gloo's annotations name none.

A real 2 x 2 DeviceMesh job in plain torch (no project code in it) on loopback, where a rank's
groups run side by side and its instances of different groups end close together, and hand-made
instances for the cases timing alone gets wrong.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from conftest import ingest_directly, table_rows
from pipelines.analysis.gloo_groups import assign
from pipelines.warehouse.store import Warehouse

MESH_JOB = textwrap.dedent('''
    import os, socket, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh

    def run(rank, world, port, folder):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        dp, tp = mesh.get_group("dp"), mesh.get_group("tp")
        partner = [r for r in dist.get_process_group_ranks(dp) if r != rank][0]
        x, y = torch.randn(256, 1024), torch.randn(64, 1024)
        # Five steps: each group's two worker threads show up, whose order then settles the groups.
        schedule = torch.profiler.schedule(wait=0, warmup=1, active=5)
        with torch.profiler.profile(record_shapes=True, schedule=schedule,
                                    on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(folder, f"rank{rank}.json"))) as profiler:
            for step in range(6):
                dist.all_reduce(x, group=tp)
                pending = dist.all_reduce(y, group=dp, async_op=True)
                dist.all_reduce(x, group=tp)
                pending.wait()
                dist.all_reduce(y)
                if mesh.get_local_rank("dp") == 0:
                    dist.send(x, partner, group=dp)
                else:
                    dist.recv(x, partner, group=dp)
                profiler.step()
        dist.destroy_process_group()

    if __name__ == "__main__":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(run, args=(4, port, sys.argv[1]), nprocs=4)
''')
# What each rank issues per step: the group of each collective, by its description.
PER_STEP = ["mesh_tp", "mesh_dp", "mesh_tp", "default_pg", "mesh_dp"]


def ingested_job(folder, script: str, run_id: str) -> Warehouse:
    """`script` run on loopback (it writes each rank's trace to the folder it is given), its traces
    ingested as `run_id` into a warehouse in `folder`."""
    traces = folder / run_id
    traces.mkdir()
    job = folder / "job.py"
    job.write_text(script)
    subprocess.run([sys.executable, str(job), str(traces)], check=True, capture_output=True, timeout=300,
                   env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    store = Warehouse(folder / "warehouse")
    store.ensure()
    ingest_directly(store, traces, run_id)
    return store


def test_every_collective_of_a_two_dimensional_mesh_lands_in_its_group(tmp_path):
    store = ingested_job(tmp_path, MESH_JOB, "mesh")
    found = table_rows(store, "SELECT rank, step, pg_desc, op, peer, group_size FROM collectives ORDER BY rank, start_ns")
    for rank in range(4):
        mine = [row for row in found if row["rank"] == rank]
        steps = sorted({row["step"] for row in mine})
        assert len(steps) >= 2, mine
        for step in steps:  # the instances start in another order than they were issued: count them
            assert sorted(row["pg_desc"] for row in mine if row["step"] == step) == sorted(PER_STEP), (rank, step)
        partner = rank ^ 2  # dp groups {0, 2} and {1, 3}
        assert {row["peer"] for row in mine if row["op"] in ("send", "recv")} == {partner}
        assert {row["group_size"] for row in mine if row["pg_desc"] == "default_pg"} == {4}
    # Every collective matches on all of its group's ranks (a send with its receive): an instance
    # put in the wrong group would leave one collective short of ranks and another with too many.
    sync = table_rows(store, "SELECT op, ranks, group_size, op_mismatch FROM collective_sync")
    assert all(row["ranks"] == (2 if row["op"] in ("send", "recv") else row["group_size"]) for row in sync), sync
    assert not any(row["op_mismatch"] for row in sync)


PIPELINE_JOB = textwrap.dedent('''
    import os, socket, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    def run(rank, world, port, folder):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        stage = PipelineStage(torch.nn.Linear(64, 64), rank, world, torch.device("cpu"))
        schedule = Schedule1F1B(stage, 4, loss_fn=torch.nn.functional.mse_loss)
        x, y = torch.randn(32, 64), torch.randn(32, 64)
        with torch.profiler.profile(record_shapes=True, schedule=torch.profiler.schedule(wait=0, warmup=1, active=3),
                                    on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(folder, f"rank{rank}.json"))) as profiler:
            for step in range(4):
                schedule.step(x) if rank == 0 else schedule.step(target=y)
                profiler.step()
        dist.destroy_process_group()

    if __name__ == "__main__":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(run, args=(2, port, sys.argv[1]), nprocs=2)
''')


def test_a_1f1b_pipelines_sends_match_the_receives_going_their_way(tmp_path):
    """`torch.distributed.pipelining`'s 1F1B schedule on two ranks: once the pipe is full, each
    stage sends one way and receives the other at once. The k-th send from a rank to its peer is
    the k-th receive of the peer from it; counted both ways together, sends matched sends."""
    store = ingested_job(tmp_path, PIPELINE_JOB, "pipeline")
    pairs = table_rows(store, "SELECT c.collective_key, list(c.op ORDER BY c.op) AS ops, list(c.rank ORDER BY c.op) AS ranks "
                              "FROM collectives AS c WHERE c.op IN ('send', 'recv') GROUP BY c.collective_key")
    # Four micro-batches a step each way, three steps profiled.
    assert len(pairs) == 24, pairs
    assert all(row["ops"] == ["recv", "send"] and sorted(row["ranks"]) == [0, 1] for row in pairs), pairs
    forward = [row for row in pairs if row["ranks"] == [1, 0]]  # rank 1 receives what rank 0 sent
    assert len(forward) == 12


def instances(rows: list[tuple]) -> pa.Table:
    """(rank, tid, start ms, end ms, op) rows as the step's query gives them, 1 MB each."""
    return pa.table({
        "rank": [r[0] for r in rows], "tid": [str(r[1]) for r in rows],
        "start_ns": [int(r[2] * 1e6) for r in rows], "end_ns": [int(r[3] * 1e6) for r in rows],
        "op": [r[4] for r in rows], "elements": [262144] * len(rows),
        "called_here": [False] * len(rows), "peer_in_group": pa.array([None] * len(rows), type=pa.int32()),
    })


GROUPS = pa.table({
    "rank": [r for r in range(4) for _ in range(3)],
    "pg_name": ["0", "1", "3", "0", "2", "3", "0", "1", "4", "0", "2", "4"],
    "pg_ranks": [g for r in range(4) for g in ("[0, 1, 2, 3]", "[0, 2]" if r % 2 == 0 else "[1, 3]",
                                              "[0, 1]" if r < 2 else "[2, 3]")],
})


def assigned(rows: list[tuple]) -> dict[tuple[int, str], str]:
    """Each (rank, thread)'s group, as `assign` gives it for the 2 x 2 mesh of GROUPS."""
    return {(row["rank"], row["tid"]): row["pg_name"] for row in assign(instances(rows), GROUPS).to_pylist()}


def assert_mesh_groups(groups: dict[tuple[int, str], str], threads: dict[int, tuple[tuple, tuple]]) -> None:
    """Each rank's threads of the dimension across hosts in its pair, (0, 2) or (1, 3), and its tp
    threads in its host's pair."""
    for rank, (across, tp) in threads.items():
        assert {groups[rank, str(t)] for t in across} == {"1" if rank % 2 == 0 else "2"}, groups
        assert {groups[rank, str(t)] for t in tp} == {"3" if rank < 2 else "4"}, groups


def test_groups_of_the_same_members_are_told_apart_by_their_threads_order():
    """Two groups of all four ranks (the default one and a mesh of one dimension over the world): a
    rank's threads started first serve the group made first."""
    groups = pa.table({"rank": [r for r in range(4) for _ in range(2)], "pg_name": ["0", "1"] * 4,
                       "pg_ranks": ["[0, 1, 2, 3]"] * 8})
    rows = []
    for rank in range(4):
        rows += [(rank, 200 + rank, 0, 10, "allreduce"), (rank, 210 + rank, 0, 20, "allgather")]
        rows += [(rank, 220 + rank, 30, 40, "allgather"), (rank, 230 + rank, 30, 45, "allgather")]
    found = assign(instances(rows), groups).to_pylist()
    by_thread = {(row["rank"], row["tid"]): row["pg_name"] for row in found}
    assert all(by_thread[rank, str(200 + rank)] == "0" for rank in range(4))
    assert all(by_thread[rank, str(230 + rank)] == "1" for rank in range(4))


@pytest.mark.parametrize("wrapped", [(32760, 32761, 302, 303), (32767, 300, 301, 302)])
def test_threads_started_across_the_wrap_of_thread_ids_serve_the_groups_made_first(wrapped):
    """fsdp x tp on 2 hosts x 2 ranks: each rank's fsdp group (made first) and tp group have two
    threads each. Rank 0's threads started across the wrap of the system's thread ids: its tp
    threads after it (302 and 303 after 32760 and 32761, as on this machine in a full test run),
    or even its second fsdp thread. Its ids' order alone would give fsdp collectives to the tp
    group."""
    tids = {0: wrapped, 1: (1010, 1011, 1012, 1013), 2: (1020, 1021, 1022, 1023), 3: (1030, 1031, 1032, 1033)}
    rows = []
    for k in range(4):
        at = 100 * k
        for rank in range(4):
            fsdp_a, fsdp_b, tp_a, tp_b = tids[rank]
            # The fsdp pairs (0, 2) and (1, 3), then the tp pairs (0, 1) and (2, 3), each pair's
            # instances ending together and apart from the other pair's.
            rows.append((rank, fsdp_a if k % 2 else fsdp_b, at, at + 10 + 2 * (rank % 2), "allgather"))
            rows.append((rank, tp_a if k % 2 else tp_b, at + 20, at + 30 + 3 * (rank // 2), "allreduce"))
    assert_mesh_groups(assigned(rows), {rank: (t[:2], t[2:]) for rank, t in tids.items()})


def test_the_last_member_to_arrive_stays_in_its_group_though_its_partner_ends_long_after_it_began():
    """A loaded machine: rank 0 joins its dp all-reduce last, for half a millisecond, and its
    partner's end is seen 2 ms later. Rank 0's second default-group thread ran nothing, so its
    order leaves that dp thread to the default group or to dp: measured against its own short
    duration both are as far as can be, measured against the time the two instances span the
    partner is near and the default group's other ranks, which ended their dp all-reduce apart,
    are not."""
    tids = {rank: (100 * rank + 10, 100 * rank + 11, 100 * rank + 20, 100 * rank + 21, 100 * rank + 30, 100 * rank + 31)
            for rank in range(4)}
    rows = []
    for k in range(3):
        at = 100 * k
        for rank, (d0, d1, p0, p1, t0, t1) in tids.items():
            rows.append((rank, d0 if k % 2 == 0 or rank == 0 else d1, at, at + 10, "allreduce"))
            begin, end = at + 20, at + (30 if rank % 2 == 0 else 26)  # the two dp pairs end apart
            if k == 0 and rank == 0:
                begin = at + 29.5
            if k == 0 and rank == 2:
                end = at + 32
            rows.append((rank, p0 if k == 0 else p1, begin, end, "allreduce"))
            rows.append((rank, t0 if k % 2 else t1, at + 40, at + 50 + rank // 2, "allreduce"))
    groups = assigned(rows)
    assert groups[0, "20"] == groups[0, "21"] == "1", groups
    for rank, (d0, d1, *_) in tids.items():
        assert {groups[rank, str(t)] for t in (d0, d1) if (rank, str(t)) in groups} == {"0"}, groups
    assert_mesh_groups(groups, {rank: (t[2:4], t[4:]) for rank, t in tids.items()})


def test_a_group_fitting_as_well_as_the_default_group_of_all_ranks_takes_the_thread():
    """A 2 x 2 mesh whose default group ran nothing while profiling, so each rank's first place in
    the order is free. The two dp pairs all-reduce at once, and on rank 1 the other pair's ends lie
    nearer its own than its partner's does: the default group of all four fits its dp thread
    exactly as well as dp. The group of fewer members is the one its instances show."""
    tids = {rank: (100 * rank + 20, 100 * rank + 21, 100 * rank + 30, 100 * rank + 31) for rank in range(4)}
    ends = {0: 10.1, 1: 10.0, 2: 10.2, 3: 10.4}  # the dp pairs (0, 2) and (1, 3)
    rows = []
    for k in range(3):
        at = 100 * k
        for rank, (p0, p1, t0, t1) in tids.items():
            rows.append((rank, p0 if k % 2 == 0 else p1, at, at + ends[rank], "allreduce"))
            rows.append((rank, t0 if k % 2 else t1, at + 40, at + 50 + 3 * (rank // 2), "allreduce"))
    assert_mesh_groups(assigned(rows), {rank: (t[:2], t[2:]) for rank, t in tids.items()})
