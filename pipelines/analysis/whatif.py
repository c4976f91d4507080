"""The paper's what-if: how a run would scale if every all-reduce ran at the full line rate.

The model (Zhang et al. 2020, §1.5, restated in docs/whatif.md) takes gradient buckets in the order
they become ready during backward and runs them through one FIFO channel at full line rate. This
module holds the parts that are sequential by nature, the fusion policies that turn per-gradient
ready times into buckets, and the reduce-cost table; the channel, the grid and the searches are
SQL (`sql/whatif.sql`, `sql/whatif_targets.sql`), shared by the per-run assets and the CLI.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import duckdb

from pipelines.warehouse import sql

MIB = 1 << 20

# Default grid, as the issue and the paper sweep it.
DEFAULT_BANDWIDTHS_GBPS = (1.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0)
DEFAULT_COMPRESSIONS = (1.0, 2.0, 5.0, 10.0)
DEFAULT_RANK_MULTIPLES = (1, 8, 64)
DEFAULT_TARGETS = (0.95, 0.99)

# Time to add x bytes on the device, a(x): the paper's measured V100 vector-add points (about 10 us up
# to 1.3 MB, 48 us at 10 MB, 2.4 ms at 671 MB), interpolated linearly and extended with the last
# slope. Give a measured table of your own device with --reduce-cost.
DEFAULT_REDUCE_COST = ((0, 10e-6), (1_300_000, 10e-6), (10_000_000, 48e-6), (671_000_000, 2.4e-3))


@dataclass(frozen=True)
class Gradient:
    ready_s: float  # since the start of backward
    bytes: int


@dataclass(frozen=True)
class Bucket:
    ready_s: float
    bytes: int


def fuse_horovod(gradients: list[Gradient], cycle_s: float = 0.005, fusion_bytes: int = 64 * MIB) -> list[Bucket]:
    """Horovod's tensor fusion: a bucket closes once the cycle time has passed or it is full.

    Gradients join the open bucket in ready order; right after one joins, the bucket closes at that
    gradient's ready time if the time since the previous bucket closed (or since backward began) has
    reached `cycle_s`, or its bytes have reached `fusion_bytes`. What remains closes at the last
    gradient's ready time (the end of backward).
    """
    buckets: list[Bucket] = []
    open_bytes = 0
    last_close = 0.0
    for gradient in gradients:
        open_bytes += gradient.bytes
        if gradient.ready_s - last_close >= cycle_s or open_bytes >= fusion_bytes:
            buckets.append(Bucket(gradient.ready_s, open_bytes))
            open_bytes = 0
            last_close = gradient.ready_s
    if open_bytes:
        buckets.append(Bucket(gradients[-1].ready_s, open_bytes))
    return buckets


def fuse_ddp(gradients: list[Gradient], bucket_bytes: int = 25 * MIB, first_bucket_bytes: int = 1 * MIB) -> list[Bucket]:
    """PyTorch DDP's buckets: filled in ready order up to a cap (a smaller one for the first bucket).

    A bucket is ready when its last gradient is; it closes as soon as its bytes reach the cap.
    """
    buckets: list[Bucket] = []
    open_bytes = 0
    cap = first_bucket_bytes
    for gradient in gradients:
        open_bytes += gradient.bytes
        if open_bytes >= cap:
            buckets.append(Bucket(gradient.ready_s, open_bytes))
            open_bytes = 0
            cap = bucket_bytes
    if open_bytes:
        buckets.append(Bucket(gradients[-1].ready_s, open_bytes))
    return buckets


def fuse_none(gradients: list[Gradient]) -> list[Bucket]:
    """No fusion: every gradient is all-reduced on its own, as soon as it is ready."""
    return [Bucket(g.ready_s, g.bytes) for g in gradients]


def fuse(policy: str, gradients: list[Gradient], cycle_ms: float, fusion_mib: float, bucket_mib: float) -> list[Bucket]:
    if not gradients:
        return []
    if policy == "horovod":
        return fuse_horovod(gradients, cycle_ms / 1000, int(fusion_mib * MIB))
    if policy == "ddp":
        return fuse_ddp(gradients, int(bucket_mib * MIB))
    if policy == "none":
        return fuse_none(gradients)
    raise ValueError(f"unknown fusion policy {policy!r}: horovod, ddp, none or observed")


def read_timeline(path: Path) -> list[Gradient]:
    """A gradient timeline CSV: header `ready_us,bytes`, one row per gradient in ready order."""
    gradients = []
    with open(path, newline="") as handle:
        rows = csv.reader(handle)
        header = [h.strip() for h in next(rows, [])]
        if header != ["ready_us", "bytes"]:
            raise ValueError(f"{path}:1: the header must be 'ready_us,bytes', not {','.join(header)!r}")
        for line, row in enumerate(rows, start=2):
            try:
                ready_us, size = float(row[0]), int(row[1])
            except (IndexError, ValueError):
                raise ValueError(f"{path}:{line}: expected a number of microseconds and a number of bytes, got {row}") from None
            if gradients and ready_us < gradients[-1].ready_s * 1e6:
                raise ValueError(f"{path}:{line}: rows must be in ready order (ready_us never decreases)")
            gradients.append(Gradient(ready_us / 1e6, size))
    if not gradients:
        raise ValueError(f"{path}: no gradients")
    return gradients


def read_reduce_cost(path: Path | None) -> list[tuple[int, float]]:
    """a(x) as (bytes, seconds) points: rows `bytes,seconds` (a header line is allowed)."""
    if path is None:
        return list(DEFAULT_REDUCE_COST)
    points = []
    with open(path, newline="") as handle:
        for line, row in enumerate(csv.reader(handle), start=1):
            if not row or (line == 1 and not row[0].strip().replace(".", "").isdigit()):
                continue
            try:
                points.append((int(float(row[0])), float(row[1])))
            except (IndexError, ValueError):
                raise ValueError(f"{path}:{line}: expected 'bytes,seconds', got {row}") from None
    if len(points) < 2:
        raise ValueError(f"{path}: a reduce-cost table needs at least two points")
    return sorted(points)


@dataclass(frozen=True)
class Grid:
    ranks: tuple[int, ...]
    bandwidths_gbps: tuple[float, ...]
    compressions: tuple[float, ...]
    targets: tuple[float, ...] = DEFAULT_TARGETS

    def __post_init__(self):
        if any(n < 1 for n in self.ranks):
            raise ValueError("ranks must be at least 1")
        if any(b <= 0 for b in self.bandwidths_gbps):
            raise ValueError("bandwidths must be positive")
        if any(c < 1 for c in self.compressions):
            raise ValueError("compression ratios are at least 1 (uncompressed / compressed bytes)")
        if any(not 0 < t < 1 for t in self.targets):
            raise ValueError("target scaling factors lie between 0 and 1")


# The tables `register_inputs` gives the what-if SQL.
INPUT_TABLES = ("_whatif_grid", "_whatif_targets", "_reduce_cost")


def register_inputs(
    con: duckdb.DuckDBPyConnection, grid: Grid, reduce_cost: list[tuple[int, float]], temporary: bool = True
) -> None:
    """Give the what-if SQL its grid and reduce-cost table (INPUT_TABLES; in the connection's
    database, for all its connections, with `temporary` False)."""
    cells = [(n, b, c) for n in grid.ranks for b in grid.bandwidths_gbps for c in grid.compressions]
    grid_table, targets_table, cost_table = INPUT_TABLES
    _temp_table(con, grid_table, {
        "ranks": [c[0] for c in cells], "bandwidth_gbps": [float(c[1]) for c in cells], "compression": [float(c[2]) for c in cells],
    }, temporary)
    _temp_table(con, targets_table, {"target": [float(t) for t in grid.targets]}, temporary)
    _temp_table(con, cost_table, {"bytes": [p[0] for p in reduce_cost], "seconds": [float(p[1]) for p in reduce_cost]}, temporary)


def _temp_table(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, list], temporary: bool = True) -> None:
    """A table of these columns (equal-length lists of a few rows), passed as parameters."""
    select = ", ".join(f'unnest(${i}) AS "{column}"' for i, column in enumerate(columns, start=1))
    created = "CREATE OR REPLACE TEMP TABLE" if temporary else "CREATE OR REPLACE TABLE"
    con.execute(f'{created} "{name}" AS SELECT {select}', list(columns.values())).fetchall()


def register_scenario(
    con: duckdb.DuckDBPyConnection, buckets: list[Bucket], compute_s: float, ranks: int, description: str
) -> None:
    """Replace the scenario the what-if SQL reads with these buckets (for a timeline or a re-fusion)."""
    if compute_s <= 0:
        raise ValueError("the step time without communication (--compute-ms) must be positive")
    backward_s = max((b.ready_s for b in buckets), default=0.0)
    _temp_table(con, "_whatif_scenario_input", {
        "bucket": list(range(1, len(buckets) + 1)),
        "ready_ns": [round(b.ready_s * 1e9) for b in buckets],
        "bytes": [b.bytes for b in buckets],
        "backward_ns": [round(backward_s * 1e9)] * len(buckets),
        "compute_ns": [round(compute_s * 1e9)] * len(buckets),
        "ranks": [ranks] * len(buckets),
        "description": [description] * len(buckets),
    })
    sql.materialize_from(con, "_whatif_scenario", "_whatif_scenario_input")


@dataclass
class Scenario:
    """A bucket timeline to replay, with the communication-free step time and the ranks it ran on."""

    buckets: list[Bucket]
    compute_s: float
    ranks: int
    description: str


def run_scenario(con: duckdb.DuckDBPyConnection) -> Scenario:
    """The scenario the run's own traces give (its `_whatif_scenario`, built from gradient_buckets)."""
    sql.materialize(con, "_whatif_scenario")
    rows = con.execute(
        "SELECT ready_ns, bytes, compute_ns, ranks, description FROM _whatif_scenario ORDER BY bucket"
    ).fetchall()
    if not rows:
        raise LookupError("the run has no gradient buckets (no allreduce or reducescatter issued during backward)")
    buckets = [Bucket(ready_ns / 1e9, size) for ready_ns, size, *_ in rows]
    return Scenario(buckets, rows[0][2] / 1e9, rows[0][3], rows[0][4])


def replay(
    con: duckdb.DuckDBPyConnection,
    scenario: Scenario,
    grid: Grid,
    reduce_cost: list[tuple[int, float]],
    label: str,
    fusion: str,
    run_link_gbps: float | None = None,
) -> list[dict]:
    """Run the model over the grid; one dict per cell, with what it takes to reach each target."""
    register_scenario(con, scenario.buckets, scenario.compute_s, scenario.ranks, scenario.description)
    register_inputs(con, grid, reduce_cost)
    sql.set_variables(con, run_id=label, fusion=fusion, run_link_gbps=run_link_gbps)
    for name in ("_whatif_costs", "_whatif_paper", "_whatif_paper_targets"):
        sql.materialize(con, name)
    cells = con.sql(
        "SELECT ranks, bandwidth_gbps, compression, buckets, backward_ns, compute_ns, exposed_ns, step_ns, "
        "scaling_factor, no_overlap_scaling_factor, scenario FROM _whatif_paper ORDER BY ranks, bandwidth_gbps, compression"
    ).fetchall()
    needs = con.execute(
        "SELECT ranks, bandwidth_gbps, target, min_compression, min_bandwidth_gbps FROM _whatif_paper_targets"
    ).fetchall()
    compression_needed = {(n, b, t): c for n, b, t, c, _ in needs}
    bandwidth_needed = {(n, t): g for n, _, t, _, g in needs}
    rows = []
    for n, b, c, buckets, backward, compute, exposed, step, sf, no_overlap, description in cells:
        rows.append({
            "model": "paper",
            "ranks": n,
            "bandwidth_gbps": b,
            "compression": c,
            "exposed_ms": exposed / 1e6,
            "step_ms": step / 1e6,
            "scaling_factor": sf,
            "no_overlap_scaling_factor": no_overlap,
            "compute_ms": compute / 1e6,
            "backward_ms": backward / 1e6,
            "buckets": buckets,
            "fusion": fusion,
            "scenario": description,
            "min_compression": {str(t): compression_needed[(n, b, t)] for t in grid.targets},
            "min_bandwidth_gbps": {str(t): bandwidth_needed[(n, t)] for t in grid.targets},
        })
    return rows
