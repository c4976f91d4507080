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


@dataclass
class Rank:
    rank: int
    host: str
    steps: list[tuple[int, float, float]]  # (step number, start us, duration us) on the CPU
    kernels: list[Kernel] = field(default_factory=list)
    cpu_ops: list[tuple[str, float, float]] = field(default_factory=list)  # (name, start us, duration us)


def write_run(folder: Path, ranks: list[Rank], world_size: int, pg_ranks: list[int] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        events = []
        for number, start, dur in rank.steps:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 10, "tid": 10,
                           "ts": start, "dur": dur, "args": {"External id": number}})
        for name, start, dur in rank.cpu_ops:
            events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 10, "tid": 11, "ts": start, "dur": dur, "args": {}})
        for index, kernel in enumerate(rank.kernels):
            correlation = 1000 + index
            args = {"correlation": correlation, "stream": kernel.stream, "device": 0, "External id": 5000 + index}
            if kernel.collective:
                args.update({
                    "Collective name": kernel.collective, "In msg nelems": kernel.nelems, "Out msg nelems": kernel.nelems,
                    "Group size": kernel.group_size, "dtype": kernel.dtype, "Process Group Name": kernel.pg,
                    "Process Group Description": kernel.pg_desc or ("default_pg" if kernel.pg == "0" else "custom"),
                    "Process Group Ranks": json.dumps(pg_ranks or list(range(world_size))),
                })
                if kernel.seq is not None:
                    args["Seq"] = kernel.seq
                if kernel.comms_id is not None:
                    args["Comms Id"] = kernel.comms_id
            # The launch happens on the CPU inside the step, a little before the kernel runs.
            launch = kernel.launch_us if kernel.launch_us is not None else _launch_time(rank, kernel.start_us)
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10,
                           "ts": launch, "dur": 1, "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": kernel.name, "pid": 0, "tid": kernel.stream,
                           "ts": kernel.start_us, "dur": kernel.dur_us, "args": args})
        trace = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": rank.rank, "world_size": world_size,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                               "pg_size": world_size, "ranks": pg_ranks or list(range(world_size))}]},
            "host_name": rank.host,
            "traceEvents": events,
            "baseTimeNanoseconds": BASE_NS,
        }
        blocks = ",\n".join("  " + json.dumps(e) for e in trace.pop("traceEvents"))
        head = json.dumps(trace)[1:-1]
        (folder / f"rank{rank.rank}.json").write_text("{" + head + ',\n  "traceEvents": [\n' + blocks.replace("}, {", "},\n  {") + "\n  ]\n}")
    return folder


def _launch_time(rank: Rank, kernel_start: float) -> float:
    """The start of the last step that began before the kernel, plus 1 us."""
    started = [start for _, start, _ in rank.steps if start <= kernel_start]
    return (max(started) if started else kernel_start) + 1


def ns(us: float) -> int:
    """An absolute time in ns for a time in us from the base."""
    return BASE_NS + round(us * 1000)
