"""`wirespeed compare RUN_A RUN_B`: what changed in the typical step from one run to the other, and why.

The step is split into parts that add up to it (sql/compare/parts.sql): compute, waiting for
other ranks, exposed communication per parallel dimension and link, other and idle. Beside them,
the kinds of collective whose time changed most (matched by op, group and size) and the ranks
that changed most; and what the two runs differ in that a comparison cannot see past.
"""

from __future__ import annotations

import json
from typing import TextIO

from pipelines.commands.query import text_table
from pipelines.settings import Settings
from pipelines.warehouse import sql
from pipelines.warehouse.store import Warehouse

MAX_COLLECTIVES = 20
MAX_RANKS = 10
TABLES = ("runs", "step_breakdown", "step_sync", "step_comm_groups", "collectives", "collective_bw")


def compare(store: Warehouse, settings: Settings, run_a: str, run_b: str) -> dict:
    """The comparison of two published runs, as one JSON-ready object."""
    for run_id in (run_a, run_b):
        if store.published(run_id) is None:
            raise LookupError(f"run {run_id!r} is not in the warehouse {store.root}")
    con = store.connect(settings.duckdb_config(), [run_a, run_b], TABLES)
    try:
        sql.use_macros(con)
        sql.set_variables(con, run_a=run_a, run_b=run_b, max_collectives=MAX_COLLECTIVES, max_ranks=MAX_RANKS)
        steps = sql.query_rows(con, "compare/steps")
        parts = [{k: v for k, v in row.items() if k != "part_order"} for row in sql.query_rows(con, "compare/parts")]
        collectives = sql.query_rows(con, "compare/collectives")
        ranks = sql.query_rows(con, "compare/ranks")
    finally:
        con.close()
    a, b = steps if len(steps) == 2 else (steps[0], steps[0])  # a run compared with itself
    step = {"a": a["step_ms"], "b": b["step_ms"], "delta": _delta(a["step_ms"], b["step_ms"])}
    grown = max(parts, key=lambda part: abs(part["delta_ms"]), default=None)
    return {
        "run_a": run_a,
        "run_b": run_b,
        "step_ms": step,
        "median_step_ms": {"a": a["median_step_ms"], "b": b["median_step_ms"]},
        "parts": parts,
        "largest_change": None if grown is None or step["delta"] is None else grown["part"],
        "collectives": collectives,
        "ranks": ranks,
        "notes": _notes(a, b, collectives),
    }


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _notes(a: dict, b: dict, collectives: list[dict]) -> list[str]:
    """What the two runs differ in that the comparison cannot see past, and what it leaves out."""
    notes = [f"run {run['run_id']} has no profiler steps, so it has no step to compare" for run in (a, b) if not run["rank_steps"]]
    if a["world_size"] != b["world_size"] or a["ranks"] != b["ranks"]:
        notes.append(
            f"the runs differ in size ({a['world_size']} and {b['world_size']} ranks, {a['ranks']} and {b['ranks']} traced): "
            "per-rank figures cover the ranks in both, and a group whose size changed is a different kind of collective"
        )
    if a["link_gbps"] != b["link_gbps"]:
        rates = " and ".join("unknown" if run["link_gbps"] is None else f"{run['link_gbps']:g} Gbit/s" for run in (a, b))
        notes.append(f"the line rates differ ({rates})")
    if a["backend"] != b["backend"]:
        notes.append(f"the backends differ ({a['backend']} and {b['backend']})")
    alone = sum(1 for row in collectives if row["a_median_us"] is None or row["b_median_us"] is None)
    if alone:
        notes.append(f"{alone} of the kinds of collective listed ran in one run only")
    return notes


def print_comparison(result: dict, output_format: str, out: TextIO) -> None:
    if output_format == "json":
        out.write(json.dumps(result, indent=2) + "\n")
        return
    step = result["step_ms"]
    out.write(f"{result['run_a']} -> {result['run_b']}\n")
    if step["delta"] is None:
        out.write("no typical step to compare\n")
    else:
        out.write(f"typical step (interquartile mean): {step['a']:.3f} ms -> {step['b']:.3f} ms ({step['delta']:+.3f} ms, "
                  f"{step['delta'] / step['a']:+.1%})\n")
        out.write(f"largest change: {result['largest_change']}\n\n")
    out.write(_text(result["parts"], ("part", "a_ms", "b_ms", "delta_ms")))
    if result["collectives"]:
        out.write("\ncollectives whose time per step changed most:\n")
        out.write(_text(result["collectives"], ("op", "pg", "bytes", "a_per_step", "b_per_step", "a_median_us",
                                                "b_median_us", "delta_ms_per_step", "a_busbw_gbps", "b_busbw_gbps")))
    if result["ranks"]:
        out.write("\nranks whose step changed most:\n")
        out.write(_text(result["ranks"], ("rank", "a_step_ms", "b_step_ms", "delta_step_ms", "delta_exposed_ms")))
    for note in result["notes"]:
        out.write(f"note: {note}\n")


def _text(rows: list[dict], columns: tuple[str, ...]) -> str:
    return text_table(list(columns), [tuple(_cell(row[c]) for c in columns) for row in rows])


def _cell(value):
    return f"{value:.3f}" if isinstance(value, float) else value
