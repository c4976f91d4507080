"""Real multi-node training jobs, one per parallelism, small enough for CPUs and gloo.

Each job is sized so that its communication is a large share of a step on a slow link (about
0.3 s of it at 200 Mbit/s, 8-12 MB through each host's NIC per step) and its compute is small
(0.05-0.2 s on one core): the emulated cluster's tests compare what wirespeed measures with how
much faster the step gets on a faster link.

    ddp   DistributedDataParallel MLP, 1 MB gradient buckets all-reduced during backward
    ddp-buckets  DistributedDataParallel, two gradient buckets of different sizes (2.1 and 4.2 MB)
          that gloo's worker threads all-reduce at the same time
    zero  ZeRO stage 1: the ddp job's buckets, then each rank broadcasts the parameters whose
          optimiser state it holds (`ZeroRedundancyOptimizer`)
    fsdp  FSDP2 (`fully_shard` per layer and on the root): all-gathers and reduce-scatters
    tp    Megatron tensor parallel MLP: column- then row-parallel linears, all-reduce of the
          activations in forward and of the input's gradient in backward
    pp    two pipeline stages, GPipe: every micro-batch forward, then every one backward, with
          blocking send/recv of activations and gradients between the stages
    pp-isend  the same with `dist.isend`: a stage goes on computing while its sends go out
    pp-schedule  the same stages under `torch.distributed.pipelining` (`Schedule1F1B`)
    ep    a top-1 mixture-of-experts layer, one expert per rank: all-to-all dispatch and combine
          (both directions of autograd), all-reduce of the router's gradients
    dp-tp    a 2-D mesh (`init_device_mesh`, dims dp and tp): tensor parallel over the ranks of a
          host, DistributedDataParallel over the hosts
    fsdp-tp  a 2-D mesh (dims fsdp and tp): tensor parallel over the ranks of a host, FSDP2 over
          the hosts
    ep-dp    a 2-D mesh (dims dp and ep): the mixture of experts over the ranks of a host,
          DistributedDataParallel over the hosts
    hsdp  FSDP2 on a 2-D mesh (dims replicate and shard), hybrid sharding: parameters sharded over
          the ranks of a host, gradients all-reduced over the hosts

With several ranks per host, the pipeline job puts its two stages on the first and second halves of
the ranks (with two hosts: one stage per host) and all-reduces each stage's gradients over the
ranks of that stage (a `dp` group), as pipeline x data parallel does.

    python -m collectors.jobs --job tp --nnodes 2 --node-rank 0 --nproc-per-node 1 \\
        --master-addr 198.18.0.1 --master-port 29500 --steps 8

`--straggler-ms MS` makes the last rank a straggler: it waits MS in each step before its own work,
as a rank whose data loader is slow does, and the others wait for it. It sleeps rather than
computes, so that on a machine with fewer cores than ranks it does not slow the others too.

Run it once per host; global rank = node rank * nproc-per-node + local rank. Sockets use the
interface in GLOO_SOCKET_IFNAME (from the environment). Each rank profiles itself with `Capture`
(steps after the first two) and, when done, prints one JSON line to stdout with its own wall-clock
step times, which a caller can parse and the ingest never sees:

    {"wirespeed_job": "tp", "rank": 0, "step_ns": [412345678, ...]}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from collectors.capture import Capture

Step = Callable[[], None]


@dataclass(frozen=True)
class Layout:
    """Where a rank sits: its global rank, the world's size and how many ranks each host runs."""

    rank: int
    world: int
    per_host: int


def mlp(width: int, depth: int) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def sgd_step(module: torch.nn.Module, loss_of: Callable[[], torch.Tensor], optimiser=None) -> Step:
    """One training step: `optimiser` (SGD over the module's parameters unless given) after backward."""
    optimiser = optimiser or torch.optim.SGD(module.parameters(), lr=0.01)

    def step() -> None:
        optimiser.zero_grad()
        loss_of().backward()
        optimiser.step()

    return step


# --- data parallel -----------------------------------------------------------------------------

def ddp_job(layout: Layout) -> Step:
    """8.4 MB of gradients in 1 MB buckets: the first buckets overlap backward, the last do not."""
    from torch.nn.parallel import DistributedDataParallel  # here, not at the top: only this job pays for it

    network = DistributedDataParallel(mlp(1024, 2), bucket_cap_mb=1)
    inputs, targets = torch.randn(256, 1024), torch.randn(256, 1024)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets))


def zero_job(layout: Layout) -> Step:
    """ZeRO stage 1: DistributedDataParallel's 1 MB buckets, then `ZeroRedundancyOptimizer` updates
    each rank's share of the parameters and broadcasts it to the others (8.4 MB a step)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    network = DistributedDataParallel(mlp(1024, 2), bucket_cap_mb=1)
    optimiser = ZeroRedundancyOptimizer(network.parameters(), optimizer_class=torch.optim.SGD, lr=0.01)
    inputs, targets = torch.randn(256, 1024), torch.randn(256, 1024)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets), optimiser)


def ddp_buckets_job(layout: Layout) -> Step:
    """Two linears of 4.2 and 2.1 MB with `bucket_cap_mb=2`: two buckets of different sizes, the
    second ready before the first has crossed the link, so gloo's two worker threads all-reduce them
    at once and they share the link."""
    from torch.nn.parallel import DistributedDataParallel

    layers = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    network = DistributedDataParallel(layers, bucket_cap_mb=2)
    inputs, targets = torch.randn(256, 1024), torch.randn(256, 512)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets))


def fsdp_job(layout: Layout) -> Step:
    """Parameters sharded per layer: all-gathered in forward and again in backward, grads
    reduce-scattered. On CPUs FSDP2 waits for each all-gather where it issues it (there are no
    streams to prefetch on), so all of its communication is exposed."""
    from torch.distributed.device_mesh import init_device_mesh  # FSDP's imports take about 2 s: its job alone pays

    return sharded_mlp_step(init_device_mesh("cpu", (layout.world,), mesh_dim_names=("fsdp",)))


def sharded_mlp_step(mesh) -> Step:
    """The step of an MLP whose layers FSDP2 shards over `mesh` (on a 2-D mesh: hybrid sharding)."""
    from torch.distributed.fsdp import fully_shard

    network = mlp(1024, 2)
    for layer in network:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(network, mesh=mesh)
    inputs, targets = torch.randn(256, 1024), torch.randn(256, 1024)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets))


# --- tensor parallel (Megatron-LM's f and g operators) ----------------------------------------

class ColumnParallelLinear(torch.autograd.Function):
    """Megatron's column-parallel linear on a replicated input: backward all-reduces the input's
    gradient asynchronously while it computes the weight's gradient, then waits (Megatron-LM's
    LinearWithGradAccumulationAndAsyncCommunication)."""

    @staticmethod
    def forward(ctx, tensor, weight, bias, group):
        ctx.save_for_backward(tensor, weight)
        ctx.group = group
        return torch.nn.functional.linear(tensor, weight, bias)

    @staticmethod
    def backward(ctx, gradient):
        tensor, weight = ctx.saved_tensors
        input_gradient = gradient @ weight
        summed = dist.all_reduce(input_gradient, group=ctx.group, async_op=True)
        weight_gradient = gradient.t() @ tensor
        bias_gradient = gradient.sum(0)
        summed.wait()
        return input_gradient, weight_gradient, bias_gradient, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's g: sum the row-parallel partial outputs; the gradient is already replicated."""

    @staticmethod
    def forward(ctx, tensor, group):
        tensor = tensor.clone()
        dist.all_reduce(tensor, group=group)
        return tensor

    @staticmethod
    def backward(ctx, gradient):
        return gradient, None


class TensorParallelMLP(torch.nn.Module):
    """A Megatron MLP block sharded over `group` (None: every rank) of `size` ranks."""

    def __init__(self, width: int, hidden: int, size: int, group=None):
        super().__init__()
        self.group = group
        self.column = torch.nn.Linear(width, hidden // size)  # output features sharded
        self.row = torch.nn.Linear(hidden // size, width, bias=False)  # input features sharded

    def forward(self, tensor):
        hidden = ColumnParallelLinear.apply(tensor, self.column.weight, self.column.bias, self.group)
        return ReduceFromTensorParallel.apply(self.row(torch.nn.functional.gelu(hidden)), self.group)


def tensor_parallel_blocks(size: int, group=None) -> torch.nn.Sequential:
    """Two blocks on 1024 tokens of width 512: four 2 MB all-reduces per step over `group`, those
    of backward overlapped with the weight gradients' compute."""
    return torch.nn.Sequential(TensorParallelMLP(512, 1024, size, group), TensorParallelMLP(512, 1024, size, group))


def tp_job(layout: Layout) -> Step:
    torch.manual_seed(0)  # the replicated input must be the same on every rank
    network = tensor_parallel_blocks(layout.world)
    inputs, targets = torch.randn(1024, 512), torch.randn(1024, 512)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets))


# --- two-dimensional meshes: tensor parallel inside each host, data parallel across hosts -------

def host_mesh(layout: Layout, outer: str, inner: str = "tp"):
    """A (hosts, ranks per host) DeviceMesh with dims (`outer`, `inner`): each inner group is one host's ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (layout.world // layout.per_host, layout.per_host), mesh_dim_names=(outer, inner))


def dp_tp_job(layout: Layout) -> Step:
    """Megatron blocks over each host's ranks, DistributedDataParallel (4.2 MB of gradient shards
    in 1 MB buckets) over the ranks that hold the same shard on other hosts."""
    from torch.nn.parallel import DistributedDataParallel

    mesh = host_mesh(layout, "dp")
    torch.manual_seed(mesh.get_local_rank("dp"))  # a tp group's replicated input is the same on its ranks
    blocks = tensor_parallel_blocks(layout.per_host, mesh.get_group("tp"))
    network = DistributedDataParallel(blocks, process_group=mesh.get_group("dp"), bucket_cap_mb=1)
    inputs, targets = torch.randn(1024, 512), torch.randn(1024, 512)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets))


def fsdp_tp_job(layout: Layout) -> Step:
    """Megatron blocks over each host's ranks, each block's shards sharded again by FSDP2 over the
    hosts: all-gathers and reduce-scatters cross the network, the blocks' all-reduces do not."""
    from torch.distributed.fsdp import fully_shard

    mesh = host_mesh(layout, "fsdp")
    torch.manual_seed(mesh.get_local_rank("fsdp"))
    network = tensor_parallel_blocks(layout.per_host, mesh.get_group("tp"))
    for block in network:
        fully_shard(block, mesh=mesh["fsdp"])
    fully_shard(network, mesh=mesh["fsdp"])
    inputs, targets = torch.randn(1024, 512), torch.randn(1024, 512)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets))


def hsdp_job(layout: Layout) -> Step:
    """FSDP2's hybrid sharding: each layer all-gathered and reduce-scattered within the host, each
    rank's reduced shard (4.2 MB a step in all) all-reduced with the ranks that hold it on other hosts."""
    return sharded_mlp_step(host_mesh(layout, "replicate", inner="shard"))


# --- pipeline parallel ---------------------------------------------------------------------------

PP_MICRO_BATCHES = 4


def stage_replicas(half: int) -> list | None:
    """Beyond one pair of ranks, each pipeline stage's replicas (ranks [s * half, (s + 1) * half))
    and a named group over them, `dp_stage<s>`, as pipeline x data parallel has."""
    if half == 1:
        return None
    return [dist.new_group(list(range(s * half, (s + 1) * half)), group_desc=f"dp_stage{s}") for s in (0, 1)]


def average_over(replicas: list | None, network: torch.nn.Module, stage: int) -> None:
    """Sum the stage's gradients over its replicas, as data parallelism does (nothing with one)."""
    if replicas:
        for parameter in network.parameters():
            dist.all_reduce(parameter.grad, group=replicas[stage])


def pp_job(layout: Layout, isend: bool = False) -> Step:
    """Ranks [0, world/2) are stage 0, the rest stage 1, paired rank r with r + world/2.

    Four micro-batches of 1024 tokens at width 256: 1 MB per send, 8 MB per step, and while one
    stage computes the other waits, as GPipe's bubble does. With `isend`, a stage sends with
    `dist.isend` and goes on computing, and waits for its sends before the optimiser step.
    """
    rank, world = layout.rank, layout.world
    if world % 2:
        raise ValueError("the pipeline job needs an even number of ranks")
    half = world // 2
    stage, peer = (0, rank + half) if rank < half else (1, rank - half)
    replicas = stage_replicas(half)
    network = mlp(256, 2)
    optimiser = torch.optim.SGD(network.parameters(), lr=0.01)
    inputs = [torch.randn(1024, 256) for _ in range(PP_MICRO_BATCHES)]
    targets = [torch.randn(1024, 256) for _ in range(PP_MICRO_BATCHES)]

    def send(tensor: torch.Tensor, sends: list) -> None:
        if isend:
            sends.append(dist.isend(tensor, peer))
        else:
            dist.send(tensor, peer)

    def step() -> None:
        optimiser.zero_grad()
        outputs, received, sends = [], [], []
        for micro in range(PP_MICRO_BATCHES):
            if stage == 0:
                output = network(inputs[micro])
                send(output.detach(), sends)
            else:
                activation = torch.empty(1024, 256)
                dist.recv(activation, peer)
                activation.requires_grad_()
                received.append(activation)
                output = torch.nn.functional.mse_loss(network(activation), targets[micro]) / PP_MICRO_BATCHES
            outputs.append(output)
        for micro in range(PP_MICRO_BATCHES):
            if stage == 0:
                gradient = torch.empty(1024, 256)
                dist.recv(gradient, peer)
                outputs[micro].backward(gradient)
            else:
                outputs[micro].backward()
                send(received[micro].grad, sends)
        for request in sends:
            request.wait()
        average_over(replicas, network, stage)
        optimiser.step()

    return step


def pp_schedule_job(layout: Layout) -> Step:
    """The pipeline job's stages and micro-batches under `torch.distributed.pipelining`: a
    `PipelineStage` per rank and `Schedule1F1B`, which sends with `batch_isend_irecv` and
    alternates forward and backward micro-batches once the pipe is full."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    rank, world = layout.rank, layout.world
    if world % 2:
        raise ValueError("the pipeline job needs an even number of ranks")
    half = world // 2
    stage = rank // half
    # One pipe per pair (r, r + world/2).
    pipes = [dist.new_group([r, r + half], group_desc=f"pp_pipe{r}") for r in range(half)] if half > 1 else [None]
    replicas = stage_replicas(half)
    network = mlp(256, 2)
    optimiser = torch.optim.SGD(network.parameters(), lr=0.01)
    pipe = PipelineStage(network, stage, 2, torch.device("cpu"), group=pipes[rank % half])
    schedule = Schedule1F1B(pipe, PP_MICRO_BATCHES, loss_fn=torch.nn.functional.mse_loss)
    inputs, targets = torch.randn(1024 * PP_MICRO_BATCHES, 256), torch.randn(1024 * PP_MICRO_BATCHES, 256)

    def step() -> None:
        optimiser.zero_grad()
        if stage == 0:
            schedule.step(inputs)
        else:
            schedule.step(target=targets)
        average_over(replicas, network, stage)
        optimiser.step()

    return step


# --- expert parallel -----------------------------------------------------------------------------

class AllToAll(torch.autograd.Function):
    """Equal-split all-to-all; its gradient is the same exchange run backwards."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        received = torch.empty_like(tensor)
        dist.all_to_all_single(received, tensor.contiguous(), group=group)
        return received

    @staticmethod
    def backward(ctx, gradient):
        received = torch.empty_like(gradient)
        dist.all_to_all_single(received, gradient.contiguous(), group=ctx.group)
        return received, None


class MixtureOfExperts(torch.nn.Module):
    """Top-1 routing with a fixed capacity per expert (GShard): tokens over capacity are dropped,
    so every all-to-all has equal splits."""

    def __init__(self, width: int, hidden: int, world: int, group=None):
        super().__init__()
        self.world, self.group = world, group
        self.router = torch.nn.Linear(width, world)
        self.expert = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width))

    def forward(self, tokens):
        capacity = tokens.shape[0] // self.world
        gate, chosen = torch.softmax(self.router(tokens), dim=-1).max(dim=-1)
        slots = [(chosen == e).nonzero().squeeze(1)[:capacity] for e in range(self.world)]
        dispatch = tokens.new_zeros(self.world, capacity, tokens.shape[1])
        for e, index in enumerate(slots):
            dispatch[e, : len(index)] = tokens[index]
        arrived = AllToAll.apply(dispatch.reshape(-1, tokens.shape[1]), self.group)
        returned = AllToAll.apply(self.expert(arrived), self.group).reshape(self.world, capacity, -1)
        combined = torch.zeros_like(tokens)
        for e, index in enumerate(slots):
            combined = combined.index_add(0, index, returned[e, : len(index)] * gate[index, None])
        return tokens + combined


def ep_job(layout: Layout) -> Step:
    """1024 tokens of width 1024 per rank: 4 MB per all-to-all, four per step (half leaves the host)."""
    layer = MixtureOfExperts(1024, 256, layout.world)
    optimiser = torch.optim.SGD(layer.parameters(), lr=0.01)
    inputs, targets = torch.randn(1024, 1024), torch.randn(1024, 1024)

    def step() -> None:
        optimiser.zero_grad()
        torch.nn.functional.mse_loss(layer(inputs), targets).backward()
        for parameter in layer.router.parameters():  # the router is replicated, not an expert
            dist.all_reduce(parameter.grad)
        optimiser.step()

    return step


def ep_dp_job(layout: Layout) -> Step:
    """The mixture of experts over each host's ranks (its all-to-alls stay inside the host), each
    expert replicated on the other hosts: DistributedDataParallel over the ranks that hold the same
    expert (4.2 MB of gradients in 1 MB buckets)."""
    from torch.nn.parallel import DistributedDataParallel

    mesh = host_mesh(layout, "dp", inner="ep")
    layer = MixtureOfExperts(1024, 512, layout.per_host, mesh.get_group("ep"))
    network = DistributedDataParallel(layer, process_group=mesh.get_group("dp"), bucket_cap_mb=1)
    inputs, targets = torch.randn(1024, 1024), torch.randn(1024, 1024)
    return sgd_step(network, lambda: torch.nn.functional.mse_loss(network(inputs), targets))


JOBS: dict[str, Callable[[Layout], Step]] = {
    "ddp": ddp_job, "ddp-buckets": ddp_buckets_job, "zero": zero_job, "fsdp": fsdp_job, "tp": tp_job, "pp": pp_job,
    "pp-isend": lambda layout: pp_job(layout, isend=True), "pp-schedule": pp_schedule_job, "ep": ep_job,
    "dp-tp": dp_tp_job, "fsdp-tp": fsdp_tp_job, "hsdp": hsdp_job, "ep-dp": ep_dp_job,
}


def train(local_rank: int, args: argparse.Namespace) -> None:
    rank = args.node_rank * args.nproc_per_node + local_rank
    world = args.nnodes * args.nproc_per_node
    os.environ.update(
        MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.master_port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(local_rank),
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    step = JOBS[args.job](Layout(rank, world, args.nproc_per_node))
    step_ns = []
    with Capture(wait=1, warmup=1, active=args.steps - 2, tags={"job": args.job}) as capture:
        for _ in range(args.steps):
            started_ns = time.perf_counter_ns()
            if rank == world - 1 and args.straggler_ms:
                time.sleep(args.straggler_ms / 1000)
            step()
            step_ns.append(time.perf_counter_ns() - started_ns)
            capture.step()
    report_steps({"wirespeed_job": args.job, "rank": rank, "step_ns": step_ns})
    dist.destroy_process_group()
    end_process()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=sorted(JOBS), required=True)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--steps", type=int, default=8, help="steps to run; the first two are profiler wait and warm-up")
    parser.add_argument("--straggler-ms", type=float, default=0, help="the last rank waits this long in each step")
    args = parser.parse_args()
    if args.steps < 3:
        parser.error("--steps must be at least 3")
    if args.nproc_per_node == 1:
        train(0, args)  # this process is the rank: a spawned one would import torch a second time (3 s)
    else:
        # Forked, each rank has torch already: spawned, each imported it again, and a run of two
        # ranks per host took 10-11 s where it takes 7-8 (this process has made no thread to lose).
        mp.start_processes(train, args=(args,), nprocs=args.nproc_per_node, join=True, start_method="fork")
        end_process()


def report_steps(record: dict) -> None:
    """Print the record as one line in one write: the ranks of a host share its stdout, and a
    `print` (the text, then its newline) let another rank's line in between."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (json.dumps(record) + "\n").encode())


def end_process() -> None:
    """Exit now that the rank's outputs are written and closed: torch's teardown at a normal exit
    (its libraries' destructors, no Python left to run) takes about another second."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
