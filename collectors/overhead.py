"""Benchmark: what sampling the host's counters costs a training job.

    python -m collectors.overhead [--pairs 5] [--steps 12] [--world-size 2]

Two measurements. First the sampler's own cost: the time to take one sample, and so the share of
one core it uses at the default 100 ms interval. Then the cost to training: the demo DDP job (gloo,
CPU) is captured in pairs, once with sampling and once without, alternating so that drifts of the
machine hit both alike, and the median profiled step time of each run is compared pair by pair.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from collectors import launch, sampler


def sample_cost_us(samples: int = 2000) -> float:
    """Median wall time of one sample (network and CPU counters), in microseconds."""
    costs = []
    for _ in range(samples):
        started = time.perf_counter_ns()
        sampler.read_net()
        sampler.read_cpu()
        costs.append(time.perf_counter_ns() - started)
    return statistics.median(costs) / 1000


def median_step_ms(run_dir: Path) -> float:
    """Median ProfilerStep duration over every rank and profiled step of a run folder."""
    durations = []
    for trace in sorted((run_dir / "traces").glob("rank*.json*")):
        opener = gzip.open if trace.suffix == ".gz" else open
        with opener(trace, "rt") as handle:
            events = json.load(handle)["traceEvents"]
        durations += [e["dur"] / 1000 for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    return statistics.median(durations)


def step_time_pairs(pairs: int, steps: int, world_size: int) -> list[tuple[float, float]]:
    """(with sampling, without) median step times in ms, one tuple per pair of runs."""
    command = [sys.executable, "-m", "collectors.demo_ddp", "--world-size", str(world_size), "--steps", str(steps)]
    results = []
    with tempfile.TemporaryDirectory() as landing:
        for index in range(pairs):
            timings = {}
            for interval in (100, 0) if index % 2 == 0 else (0, 100):
                run_dir, code = launch.collect(Path(landing), command, f"pair{index}-{interval}", sample_interval_ms=interval)
                if code != 0:
                    raise RuntimeError(f"the demo job failed with exit code {code}")
                timings[interval] = median_step_ms(run_dir)
            results.append((timings[100], timings[0]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    cost = sample_cost_us()
    print(f"one sample (network + CPU counters): {cost:.1f} us; at 100 ms that is {cost / 100_000:.4%} of one core")
    pairs = step_time_pairs(args.pairs, args.steps, args.world_size)
    print("pair  with sampling (ms)  without (ms)  ratio")
    for index, (with_sampling, without) in enumerate(pairs):
        print(f"{index:>4}  {with_sampling:>18.3f}  {without:>12.3f}  {with_sampling / without:.3f}")
    ratios = [w / wo for w, wo in pairs]
    print(f"median step-time ratio with/without sampling: {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} pairs)")


if __name__ == "__main__":
    main()
