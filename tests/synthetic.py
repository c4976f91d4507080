"""Small hand-made Kineto traces, laid out as Kineto writes them, whose every number is known.

Times are given in microseconds from a base; each rank's file has one ProfilerStep per step, a
compute kernel and NCCL kernels with the collective metadata PyTorch 2.4+ puts on them, each with
the runtime launch that queued it (correlation), so the device-window logic applies as on real GPUs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

BASE_NS = 1_750_000_000_000_000_000


@dataclass
class Kernel:
    start_us: float
    dur_us: float
    name: str = "void gemm_kernel(float*)"
    collective: str | None = None  # e.g. "allreduce"
    nelems: int = 0
    dtype: str = "Float"
    group_size: int = 2
    pg: str = "0"
    pg_desc: str | None = None  # default: default_pg for group "0", else custom
    seq: int | None = None
    comms_id: int | None = None
    stream: int = 7
    launch_us: float | None = None  # default: just after the start of the step it runs in
    # The kernel (its index among the rank's) whose recorded event this one's stream waits for
    # before it: a cudaEventRecord after that kernel's launch, a cudaStreamWaitEvent before this
    # one's, and the `cuda_sync` event Kineto records for the wait.
    waits_for: int | None = None


@dataclass
class Rank:
    rank: int
    host: str
    steps: list[tuple[int, float, float]]  # (step number, start us, duration us) on the CPU
    kernels: list[Kernel] = field(default_factory=list)
    cpu_ops: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start us, duration us)
    pid: int = 10  # its process, as its NCCL log lines name it


def write_run(folder: Path, ranks: list[Rank], world_size: int, pg_ranks: list[int] | None = None,
              groups: dict[str, list[int]] | None = None) -> Path:
    """Each rank's trace file; `groups` are process groups beside the default one (name: ranks),
    which a rank's trace lists where it is a member, as PyTorch does."""
    folder.mkdir(parents=True, exist_ok=True)
    members = {"0": pg_ranks or list(range(world_size)), **(groups or {})}
    for rank in ranks:
        events = []
        for number, start, dur in rank.steps:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": rank.pid, "tid": 10,
                           "ts": start, "dur": dur, "args": {"External id": number}})
        for name, start, dur in rank.cpu_ops:
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": rank.pid, "tid": 11, "ts": start, "dur": dur, "args": {}})
        for index, kernel in enumerate(rank.kernels):
            correlation = 1000 + index
            args = {"correlation": correlation, "stream": kernel.stream, "device": 0, "External id": 5000 + index}
            if kernel.collective:
                args.update({
                    "Collective name": kernel.collective, "In msg nelems": kernel.nelems, "Out msg nelems": kernel.nelems,
                    "Group size": kernel.group_size, "dtype": kernel.dtype, "Process Group Name": kernel.pg,
                    "Process Group Description": kernel.pg_desc or ("default_pg" if kernel.pg == "0" else "custom"),
                    "Process Group Ranks": json.dumps(members.get(kernel.pg, members["0"])),
                })
                if kernel.seq is not None:
                    args["Seq"] = kernel.seq
                if kernel.comms_id is not None:
                    args["Comms Id"] = kernel.comms_id
            # The launch happens on the CPU inside the step, a little before the kernel runs.
            launch = kernel.launch_us if kernel.launch_us is not None else _launch_time(rank, kernel.start_us)
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": rank.pid, "tid": 10,
                           "ts": launch, "dur": 1, "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": kernel.name, "pid": 0, "tid": kernel.stream,
                           "ts": kernel.start_us, "dur": kernel.dur_us, "args": args})
            if kernel.waits_for is not None:
                events += _stream_wait(rank, index, kernel, launch)
        _write_trace(folder / f"rank{rank.rank}.json", "nccl", rank.rank, world_size, members, rank.host, events)
    return folder


def _write_trace(path: Path, backend: str, rank: int, world_size: int, members: dict[str, list[int]], host: str,
                 events: list[dict]) -> None:
    """A rank's trace file, laid out as Kineto writes it, listing the groups (name: ranks) it is in."""
    trace = {
        "schemaVersion": 1,
        "distributedInfo": {"backend": backend, "rank": rank, "world_size": world_size,
                            "pg_config": [{"pg_name": name, "pg_desc": "default_pg" if name == "0" else "custom",
                                           "backend_config": "cuda:nccl" if backend == "nccl" else "cpu:gloo",
                                           "pg_size": len(ranks_of), "ranks": ranks_of}
                                          for name, ranks_of in members.items() if rank in ranks_of]},
        "host_name": host,
        "baseTimeNanoseconds": BASE_NS,
    }
    blocks = ",\n".join("  " + json.dumps(e) for e in events)
    head = json.dumps(trace)[1:-1]
    path.write_text("{" + head + ',\n  "traceEvents": [\n' + blocks.replace("}, {", "},\n  {") + "\n  ]\n}")


def _stream_wait(rank: Rank, index: int, kernel: Kernel, launch_us: float) -> list[dict]:
    """The record of the awaited kernel's event just after its launch, and the wait for it just
    before this kernel's launch, as Kineto writes them with `cuda_sync` events on."""
    awaited = rank.kernels[kernel.waits_for]
    recorded_at = (awaited.launch_us if awaited.launch_us is not None else _launch_time(rank, awaited.start_us)) + 0.5
    record, wait = 3000 + kernel.waits_for, 4000 + index
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecord", "pid": rank.pid, "tid": 10, "ts": recorded_at, "dur": 0.2,
         "args": {"correlation": record}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": rank.pid, "tid": 10, "ts": launch_us - 0.5,
         "dur": 0.2, "args": {"correlation": wait}},
        {"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event", "pid": 0, "tid": kernel.stream, "ts": launch_us - 0.5,
         "dur": 0.1, "args": {"cuda_sync_kind": "Stream Wait Event", "wait_on_stream": awaited.stream,
                              "wait_on_cuda_event_record_corr_id": record, "stream": kernel.stream,
                              "correlation": wait, "device": 0}},
    ]


def _launch_time(rank: Rank, kernel_start: float) -> float:
    """The start of the last step that began before the kernel, plus 1 us."""
    started = [start for _, start, _ in rank.steps if start <= kernel_start]
    return (max(started) if started else kernel_start) + 1


def ns(us: float) -> int:
    """An absolute time in ns for a time in us from the base."""
    return BASE_NS + round(us * 1000)


class NcclLog:
    """One process's NCCL 2.18-style log (`NCCL_DEBUG=INFO`), written line by line as NCCL does."""

    def __init__(self, host: str, pid: int, tid: int):
        self.host, self.pid = host, pid
        self.prefix = f"{host}:{pid}:{tid} [0] NCCL INFO"
        self.lines = [f"{self.prefix} NCCL version 2.18.3+cuda12.2"]

    def communicator(self, handle: str, rank: int, nranks: int, comm_id: str, links: list[str]) -> None:
        """Its Init START, a `Channel 00/0 : <link>` line per link, its Init COMPLETE."""
        comm = f"comm {handle} rank {rank} nranks {nranks} cudaDev 0 nvmlDev 0 busId 1000 commId {comm_id}"
        self.lines += [f"{self.prefix} {comm} - Init START", *(f"{self.prefix} Channel 00/0 : {link}" for link in links),
                       f"{self.prefix} {comm} - Init COMPLETE"]

    def all_reduce(self, handle: str, nranks: int, op_count: int, nbytes: int) -> None:
        """A float all-reduce's COLL line."""
        self.lines.append(f"{self.prefix} AllReduce: opCount {op_count:x} sendbuff 0x1 recvbuff 0x1 count {nbytes // 4} "
                          f"datatype 7 op 0 root 0 comm {handle} [nranks={nranks}] stream 0x2")

    def write(self, run_dir: Path) -> None:
        folder = run_dir / "nccl"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"nccl.{self.host}.{self.pid}.log").write_text("\n".join(self.lines) + "\n")


def write_nccl_logs(folder: Path, ranks: list[Rank], groups: dict[str, list[int]], nics: dict[int, int]) -> None:
    """An NCCL log per rank's process: each of its groups' communicators (commId from the group's
    name), and its link to the group's next rank over the network through NIC `nics[rank]`."""
    for rank in ranks:
        log = NcclLog(rank.host, rank.pid, rank.pid + 1)
        for index, (name, members) in enumerate(groups.items()):
            if rank.rank in members:
                me, n = members.index(rank.rank), len(members)
                log.communicator(f"0x{index + 1:x}0", me, n, f"0x{name.encode().hex()}",
                                 [f"{me}[0] -> {(me + 1) % n}[0] [send] via NET/IB/{nics[rank.rank]}/GDRDMA"])
        log.write(folder)


@dataclass
class GlooCall:
    """A collective of a gloo job: the group's first worker thread runs its `gloo:<op>` annotation
    while the training thread is inside `c10d::<op>_`, over the same span where it blocks, else
    (as DDP's bucket all-reduces) returning after `returns_after_us`. A send or a receive runs on
    the training thread, inside `c10d::send` or `c10d::recv_`, which names its `peer` (its rank in
    the group)."""

    group: str
    start_us: float
    dur_us: float
    nelems: int
    op: str = "allreduce"
    returns_after_us: float | None = None
    peer: int | None = None


@dataclass
class GlooRank:
    """One rank of a CPU-only gloo job: its step, compute operators and collectives on its training thread."""

    rank: int
    host: str
    step: tuple[int, float, float]  # (step number, start us, duration us)
    compute: list[tuple[float, float]]  # (start us, duration us) of each operator
    calls: list[GlooCall]
    pid: int = 10


def write_gloo_run(folder: Path, ranks: list[GlooRank], world_size: int, groups: dict[str, list[int]]) -> Path:
    """Each rank's trace as a gloo job's: groups (name: ranks, besides the default "0"), created in
    the order of their names, each with two worker threads on each member, their ids counting up."""
    folder.mkdir(parents=True, exist_ok=True)
    members = {"0": list(range(world_size)), **groups}
    for rank in ranks:
        mine = [name for name in sorted(members, key=int) if rank.rank in members[name]]
        worker = {name: rank.pid + 100 + 2 * k for k, name in enumerate(mine)}
        number, start, dur = rank.step
        events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": rank.pid,
                   "tid": rank.pid, "ts": start, "dur": dur, "args": {"External id": number}}]
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": rank.pid, "tid": rank.pid, "ts": at,
                    "dur": length, "args": {"Input Dims": [[64, 64], [64, 64]]}} for at, length in rank.compute]
        for call in rank.calls:
            dims = [[call.nelems]]
            point_to_point = call.op in ("send", "recv")
            operator = {"send": "c10d::send", "recv": "c10d::recv_"}.get(call.op, f"c10d::{call.op}_")
            args = {"Input Dims": [dims]} | ({"Concrete Inputs": ["", "", str(call.peer), ""]} if point_to_point else {})
            events.append({"ph": "X", "cat": "cpu_op", "name": operator, "pid": rank.pid, "tid": rank.pid,
                           "ts": call.start_us, "dur": call.returns_after_us or call.dur_us, "args": args})
            events.append({"ph": "X", "cat": "user_annotation", "name": f"gloo:{call.op.replace('allreduce', 'all_reduce')}",
                           "pid": rank.pid, "tid": rank.pid if point_to_point else worker[call.group], "ts": call.start_us,
                           "dur": call.dur_us, "args": {"Input Dims": dims, "Input type": ["float"]}})
        _write_trace(folder / f"rank{rank.rank}.json", "gloo", rank.rank, world_size, members, rank.host, events)
    return folder
