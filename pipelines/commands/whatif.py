"""`wirespeed whatif`: a run's step at other line rates, by the replay or by the paper's model.

    wirespeed whatif RUN_ID [--ranks N,...] [--bandwidth G,...] [--compression C,...]
    wirespeed whatif RUN_ID --model paper [--fusion horovod|ddp|none] [--baseline RUN_ID]
    wirespeed whatif --timeline grads.csv --compute-ms 128 [--fusion horovod|ddp|none]
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TextIO

import duckdb

from pipelines import settings as settings_module
from pipelines.analysis import replay, whatif
from pipelines.warehouse.store import TABLES, Warehouse, open_version


def numbers(text: str | None, kind=float) -> tuple:
    if not text:
        return ()
    try:
        return tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected a comma-separated list of numbers, not {text!r}") from None


def whatif_rows(args, warehouse_dir: Path) -> list[dict]:
    store = Warehouse(warehouse_dir)
    settings = settings_module.load(store.root)
    reduce_cost = whatif.read_reduce_cost(Path(args.reduce_cost)) if args.reduce_cost else list(settings.reduce_cost)
    targets = numbers(args.target) or whatif.DEFAULT_TARGETS
    if bool(args.run_id) == bool(args.timeline):
        raise ValueError("give a RUN_ID or --timeline FILE, not both and not neither")
    if args.timeline:
        return _timeline(args, reduce_cost, targets)
    return _run(args, store, settings, reduce_cost, targets)


def _grid(args, default_ranks: tuple[int, ...], targets: tuple[float, ...]) -> whatif.Grid:
    return whatif.Grid(
        numbers(args.ranks, int) or default_ranks,
        numbers(args.bandwidth) or whatif.DEFAULT_BANDWIDTHS_GBPS,
        numbers(args.compression) or whatif.DEFAULT_COMPRESSIONS,
        targets,
    )


def _timeline(args, reduce_cost, targets) -> list[dict]:
    if args.compute_ms is None:
        raise ValueError("--timeline needs --compute-ms: the step time without communication (t_1)")
    fusion = args.fusion or "horovod"
    if fusion == "observed":
        raise ValueError("--fusion observed replays a run's own buckets; a timeline needs horovod, ddp or none")
    gradients = whatif.read_timeline(Path(args.timeline))
    buckets = whatif.fuse(fusion, gradients, args.cycle_ms, args.fusion_mib, args.bucket_mib)
    grid = _grid(args, (16, 32, 64), targets)
    scenario = whatif.Scenario(buckets, args.compute_ms / 1000, max(grid.ranks), f"timeline {args.timeline}")
    with duckdb.connect() as con:
        return whatif.replay(con, scenario, grid, reduce_cost, f"timeline {args.timeline}", fusion)


def _run(args, store: Warehouse, settings, reduce_cost, targets) -> list[dict]:
    version = store.published(args.run_id)
    if version is None:
        raise LookupError(f"run {args.run_id!r} is not in the warehouse {store.root}")
    if args.model == "replay":
        misplaced = [flag for flag, given in (
            ("--fusion", args.fusion not in (None, "observed")), ("--baseline", args.baseline),
            ("--compute-ms", args.compute_ms is not None), ("--reduce-cost", args.reduce_cost)) if given]
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)}: the paper's model's options; add --model paper")
    elif args.at_line_rate:
        raise ValueError("--at-line-rate is the replay's: the paper's model always runs at line rate")
    con = open_version(version, settings, args.run_id, TABLES)
    try:
        if args.model == "replay":
            return _replayed(con, args, targets)
        scenario = whatif.run_scenario(con)
        link = con.execute("SELECT any_value(link_gbps) FROM runs").fetchall()[0][0]
        fusion = args.fusion or "observed"
        if fusion != "observed":
            # The finest grain a trace shows is the buckets the run used; other policies re-fuse them.
            gradients = [whatif.Gradient(b.ready_s, b.bytes) for b in scenario.buckets]
            scenario.buckets = whatif.fuse(fusion, gradients, args.cycle_ms, args.fusion_mib, args.bucket_mib)
        if args.baseline:
            scenario.compute_s = _median_step_s(store, settings, args.baseline)
            scenario.description += f"; t_1 from baseline run {args.baseline}"
        if args.compute_ms is not None:
            scenario.compute_s = args.compute_ms / 1000
            scenario.description += "; t_1 given"
        grid = _grid(args, tuple(scenario.ranks * m for m in whatif.DEFAULT_RANK_MULTIPLES), targets)
        return whatif.replay(con, scenario, grid, reduce_cost, args.run_id, fusion, link)
    finally:
        con.close()


def _replayed(con, args, targets) -> list[dict]:
    """The replay's grid for a run: per cell the predicted step, its exposure per dimension, and
    what it takes to reach each target per dimension and link."""
    model = replay.model_of(con)
    if model is None:
        raise LookupError(f"run {args.run_id!r} has no collectives to replay")
    grid = _grid(args, tuple(model.world_size * m for m in whatif.DEFAULT_RANK_MULTIPLES), targets)
    cells = [replay.Cell(n, b, c, args.at_line_rate) for n in grid.ranks for b in grid.bandwidths_gbps for c in grid.compressions]
    results, parts = model.cells(cells)
    reached = model.targets(cells, grid.targets)
    rows = []
    for cell, result in zip(cells, results, strict=True):
        exposed = {p["dimension"]: p["exposed_ns"] / 1e6 for p in parts
                   if (p["ranks"], p["bandwidth_gbps"], p["compression"]) == (cell.ranks, cell.bandwidth_gbps, cell.compression)}
        needs = [r for r in reached if (r["ranks"], r["bandwidth_gbps"]) == (cell.ranks, cell.bandwidth_gbps)]
        overall = {str(r["target"]): r for r in needs if r["dimension"] == "all"}
        rows.append({
            "model": "replay",
            "transfers": cell.transfers,
            "ranks": cell.ranks,
            "bandwidth_gbps": cell.bandwidth_gbps,
            "compression": cell.compression,
            "exposed_ms": result["exposed_ns"] / 1e6,
            "step_ms": result["step_ns"] / 1e6,
            "scaling_factor": result["scaling_factor"],
            "compute_ms": result["compute_ns"] / 1e6,
            "collectives": result["collectives"],
            "scenario": model.scenario_text(),
            "exposed_ms_by_dimension": exposed,
            "min_compression": {t: r["min_compression"] for t, r in overall.items()},
            "min_bandwidth_gbps": {t: r["min_bandwidth_gbps"] for t, r in overall.items()},
            "min_intra_gbps": {t: r["min_intra_gbps"] for t, r in overall.items()},
            "min_compression_by_dimension": {f"{r['dimension']}_sf{r['target']}": r["min_compression"]
                                             for r in needs if r["dimension"] != "all"},
        })
    return rows


def _median_step_s(store: Warehouse, settings, run_id: str) -> float:
    version = store.published(run_id)
    if version is None:
        raise LookupError(f"baseline run {run_id!r} is not in the warehouse")
    con = open_version(version, settings, run_id, TABLES)
    try:
        median = con.execute("SELECT median(step_ns) FROM step_breakdown").fetchall()[0][0]
    finally:
        con.close()
    if median is None:
        raise LookupError(f"baseline run {run_id!r} has no steps")
    return median / 1e9


def print_rows(rows: list[dict], output_format: str, out: TextIO) -> None:
    if output_format == "json":
        out.write(json.dumps(rows, indent=2) + "\n")
        return
    flat = [_flatten(row) for row in rows]
    if output_format == "csv":
        writer = csv.DictWriter(out, fieldnames=list(flat[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(flat)
        return
    columns = ["ranks", "bandwidth_gbps", "compression", "exposed_ms", "step_ms", "scaling_factor"]
    columns += [c for c in flat[0] if c.startswith(("exposed_", "no_overlap", "min_")) and c not in columns]
    cells = [[_cell(row[c]) for c in columns] for row in flat]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out.write("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)) + "\n")
    for row in cells:
        out.write("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) + "\n")
    first = rows[0]
    if first.get("model") == "replay":
        out.write(f"model: replay of every collective, transfers at the {first['transfers']} rate; {first['scenario']}, {first['collectives']} collectives, "
                  f"t_1 {first['compute_ms']:.3f} ms; exposed_<dimension>_ms: the waits each dimension's collectives "
                  "ended ('fixed': the exposure no link changes)\n")
    else:
        out.write(f"model: paper; scenario: {first['scenario']}; fusion: {first['fusion']}; {first['buckets']} buckets, "
                  f"backward {first['backward_ms']:.3f} ms, t_1 {first['compute_ms']:.3f} ms\n")


def _flatten(row: dict) -> dict:
    """One column per value: exposed_<dimension>_ms, min_<what>_sf<target>, min_compression_<dimension>_sf<target>."""
    flat = {k: v for k, v in row.items() if not isinstance(v, dict)}
    for dimension, value in row.get("exposed_ms_by_dimension", {}).items():
        flat[f"exposed_{dimension}_ms"] = value
    for name in ("min_compression", "min_bandwidth_gbps", "min_intra_gbps"):
        for target, value in row.get(name, {}).items():
            flat[f"{name}_sf{target}"] = value
    for key, value in row.get("min_compression_by_dimension", {}).items():
        flat[f"min_compression_{key}"] = value
    return flat


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
