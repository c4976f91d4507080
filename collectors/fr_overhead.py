"""Benchmark: what the Flight Recorder costs a training job.

    python -m collectors.fr_overhead [--pairs 7] [--collectives 20000] [--steps 40] [--buffer 2000]

Each measurement runs in fresh processes (the recorder reads its size once) with the recorder on
(TORCH_FR_BUFFER_SIZE=--buffer) and off (0) in turn, the order alternating pair by pair so that
drifts of the machine hit both alike. Wall time on a shared machine is noisy, so CPU time (of
every thread of the process: gloo works on its own) is measured beside it: the recorder's cost
is work done on the CPU, and other processes do not add to a process's CPU time.

- per collective: a gloo process group of one rank all-reduces one float --collectives times,
  from 40 frames deep (a training loop inside a framework), so that the recorder's work (an
  entry and the Python stack for each collective) is all there is besides c10d's own and no
  network or peer adds its noise;
- per step: the demo's DDP model (collectors.demo_ddp: 1.6 M parameters, its gradients in four
  all-reduces a step) on two gloo ranks, the median step over --steps steps after five;
- per dump: writing a full buffer as JSON, as Capture does at the end or on a signal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from collectors import flight_recorder

STACK_DEPTH = 40
WARM_STEPS = 5


def _all_reduces(rank: int, port: int, count: int, out: str) -> None:
    """The per-collective run: `count` one-float all-reduces, then a dump of the recorder."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=1)
    tensor = torch.ones(1)

    def calls(depth: int) -> tuple[float, float]:
        if depth:
            return calls(depth - 1)
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        for _ in range(count):
            dist.all_reduce(tensor)
        return (time.perf_counter_ns() - wall) / count / 1000, (time.process_time_ns() - cpu) / count / 1000

    calls(STACK_DEPTH)  # warm up, and fill the buffer
    wall_us, cpu_us = calls(STACK_DEPTH)
    with tempfile.TemporaryDirectory() as run_dir:
        started = time.perf_counter_ns()
        (written,) = flight_recorder.Recorder(Path(run_dir), rank, 1).dump("benchmark")
        dump_ms = (time.perf_counter_ns() - started) / 1e6
        dump_bytes = written.stat().st_size
    Path(out).write_text(json.dumps({"wall_us": wall_us, "cpu_us": cpu_us, "dump_ms": dump_ms, "dump_bytes": dump_bytes}))
    dist.destroy_process_group()


def _ddp_steps(rank: int, port: int, steps: int, out: str) -> None:
    """One rank of the per-step run: the demo's DDP model, each step's wall and CPU time."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from collectors.demo_ddp import model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(rank)
    network = DistributedDataParallel(model(512, 6), bucket_cap_mb=0.5)
    optimiser = torch.optim.SGD(network.parameters(), lr=0.01)
    inputs, labels = torch.randn(64, 512), torch.randint(0, 10, (64,))
    walls, cpus = [], []
    for step in range(WARM_STEPS + steps):
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(network(inputs), labels).backward()
        optimiser.step()
        if step >= WARM_STEPS:
            walls.append(time.perf_counter_ns() - wall)
            cpus.append(time.process_time_ns() - cpu)
    Path(f"{out}.{rank}").write_text(json.dumps({"wall_ms": statistics.median(walls) / 1e6, "cpu_ms": statistics.median(cpus) / 1e6}))
    dist.destroy_process_group()


def _spawn(function, buffer: int, nprocs: int, *args) -> list[dict]:
    """Run `function` on `nprocs` fresh ranks with the recorder's buffer at `buffer` entries; their results."""
    import torch.multiprocessing as mp

    from collectors.demo_ddp import free_port

    os.environ[flight_recorder.ENV_BUFFER] = str(buffer)
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result")
        mp.spawn(function, args=(free_port(), *args, out), nprocs=nprocs)
        if nprocs == 1:
            return [json.loads(Path(out).read_text())]
        return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(nprocs)]


def _compare(label: str, pairs: list[tuple[float, float]], unit: str) -> str:
    on, off = [a for a, _ in pairs], [b for _, b in pairs]
    ratios = [a / b for a, b in pairs]
    return (f"{label}: median {statistics.median(on):.3f} {unit} with the recorder, {statistics.median(off):.3f} {unit} "
            f"without; on/off per pair: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}), "
            f"difference {statistics.median(a - b for a, b in pairs):+.3f} {unit}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--collectives", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--buffer", type=int, default=flight_recorder.BUFFER_ENTRIES)
    args = parser.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    calls, steps, dumps = [], [], []
    for index in range(args.pairs):
        order = (args.buffer, 0) if index % 2 == 0 else (0, args.buffer)
        call = {size: _spawn(_all_reduces, size, 1, args.collectives)[0] for size in order}
        step = {size: _spawn(_ddp_steps, size, 2, args.steps) for size in order}
        calls.append(call)
        steps.append({size: {key: statistics.mean(r[key] for r in ranks) for key in ("wall_ms", "cpu_ms")} for size, ranks in step.items()})
        dumps.append(call[args.buffer])
        print(f"pair {index}: all-reduce {call[args.buffer]['cpu_us']:.2f} / {call[0]['cpu_us']:.2f} us CPU on / off; "
              f"DDP step {steps[-1][args.buffer]['wall_ms']:.2f} / {steps[-1][0]['wall_ms']:.2f} ms, "
              f"{steps[-1][args.buffer]['cpu_ms']:.2f} / {steps[-1][0]['cpu_ms']:.2f} ms CPU", flush=True)
    on = args.buffer
    print(f"recorder on: TORCH_FR_BUFFER_SIZE={on}; {args.pairs} pairs")
    print(_compare("one-float all-reduce, CPU", [(c[on]["cpu_us"], c[0]["cpu_us"]) for c in calls], "us"))
    print(_compare("one-float all-reduce, wall", [(c[on]["wall_us"], c[0]["wall_us"]) for c in calls], "us"))
    print(_compare("DDP step (2 ranks), CPU per rank", [(s[on]["cpu_ms"], s[0]["cpu_ms"]) for s in steps], "ms"))
    print(_compare("DDP step (2 ranks), wall", [(s[on]["wall_ms"], s[0]["wall_ms"]) for s in steps], "ms"))
    print(f"dumping a full buffer ({on} entries, {dumps[0]['dump_bytes'] / 1e6:.2f} MB of JSON): "
          f"median {statistics.median(d['dump_ms'] for d in dumps):.1f} ms")


if __name__ == "__main__":
    main()
