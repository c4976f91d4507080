"""A small gloo training job that goes wrong on purpose, the ways jobs hang or desync.

    python -m collectors.faulty_job --world-size 3 --fault skip --timeout-s 3

Every rank trains the same small MLP on its own data under `Capture` (which dumps the Flight
Recorder into the run folder): each step it all-reduces each gradient, then receives a broadcast
of a shared state from rank 0. At step --fault-step the last rank goes wrong:

    none   it does not: a clean run
    skip   it never enters the step's collectives, stuck elsewhere (it sleeps --hang-s, as a rank
           whose data loader hangs would); the others wait in the first all-reduce until the
           process group's timeout (--timeout-s) raises on them, and the launcher ends it
    size   it receives the broadcast into a buffer twice the size (it built its state with
           another width): gloo fills what arrives and no rank notices

The hanging rank prints "rank R: hanging at step S" as it starts to hang.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from collectors.capture import Capture
from collectors.demo_ddp import free_port
from collectors.jobs import end_process

FAULTS = ("none", "skip", "size")


def train(rank: int, args: argparse.Namespace, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(args.world_size))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.world_size, timeout=dt.timedelta(seconds=args.timeout_s))
    torch.manual_seed(rank)
    network = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 1))
    optimiser = torch.optim.SGD(network.parameters(), lr=0.01)
    inputs, targets = torch.randn(32, args.width), torch.randn(32, 1)
    faulty = rank == args.world_size - 1
    with Capture(wait=1, warmup=1, active=2, tags={"job": args.job}) as capture:
        for step in range(args.steps):
            fault = args.fault if faulty and step == args.fault_step else "none"
            if fault == "skip":
                print(f"rank {rank}: hanging at step {step}", flush=True)
                time.sleep(args.hang_s)
            optimiser.zero_grad()
            torch.nn.functional.mse_loss(network(inputs), targets).backward()
            for parameter in network.parameters():
                dist.all_reduce(parameter.grad)
                parameter.grad /= args.world_size
            shared = torch.zeros(args.width * (2 if fault == "size" else 1))
            dist.broadcast(shared, src=0)
            optimiser.step()
            capture.step()
    dist.destroy_process_group()
    end_process()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=3)
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--fault-step", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=3.0, help="the process groups' timeout")
    parser.add_argument("--hang-s", type=float, default=600.0, help="how long the skipping rank hangs")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--job", default="faulty-gloo")
    args = parser.parse_args()
    mp.spawn(train, args=(args, free_port()), nprocs=args.world_size, join=True)
    end_process()


if __name__ == "__main__":
    main()
