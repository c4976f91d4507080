"""A small but real data-parallel training job: DDP over gloo, one process per rank, on CPUs.

It is what `make demo` and the tests capture. Several small gradient buckets make DDP all-reduce
while backward is still computing, so the run shows communication both overlapped and exposed.

    python -m collectors.demo_ddp --world-size 2 --steps 8
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from collectors.capture import Capture
from collectors.jobs import end_process


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def model(width: int, depth: int) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))


def train(rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(args.world_size))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size)
    torch.manual_seed(rank)
    network = DistributedDataParallel(model(args.width, args.depth), bucket_cap_mb=args.bucket_mb)
    optimiser = torch.optim.SGD(network.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    inputs = torch.randn(args.batch, args.width)
    labels = torch.randint(0, 10, (args.batch,))
    with Capture(wait=1, warmup=1, active=args.steps - 2, tags={"job": args.job}) as capture:
        for _ in range(args.steps):
            optimiser.zero_grad()
            loss_fn(network(inputs), labels).backward()
            optimiser.step()
            capture.step()
    dist.destroy_process_group()
    end_process()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="steps to run; the first two are profiler wait and warm-up")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bucket-mb", type=float, default=0.5)
    parser.add_argument("--job", default="demo-ddp-gloo")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be at least 3")
    mp.spawn(train, args=(args, free_port()), nprocs=args.world_size, join=True)
    end_process()


if __name__ == "__main__":
    main()
