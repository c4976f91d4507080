"""The wirespeed side of the benchmark, run as `python -m pipelines.testbed.bench.children <what> ... MEMORY_MB`.

`ingest DIR WAREHOUSE MEMORY_MB` times what `wirespeed ingest` does to a run folder, trace files to every
analysis table (step_breakdown among them) in a fresh warehouse: the parse stage and the analysis
stage that the Dagster assets call, without Dagster's own start-up. `analysis VERSION MEMORY_MB` times the
analysis stage alone over an already parsed version. MEMORY_MB is DuckDB's memory limit
(`[resources] memory_mb`). Each prints one JSON line.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from pipelines.analysis.tables import analyze_run
from pipelines.parse.tables import parse_run
from pipelines.read.sources import discover
from pipelines.settings import Settings
from pipelines.warehouse.store import Warehouse


def ingest(run_dir: Path, root: Path, settings: Settings) -> dict:
    store = Warehouse(root)
    store.ensure()
    source = discover(run_dir)
    version = store.start_version(source.run_id, "bench", ())
    started = time.perf_counter()
    parsed = parse_run(source, version, store, settings)
    parsed_at = time.perf_counter()
    analyzed = analyze_run(source.run_id, version, store, settings)
    done = time.perf_counter()
    return {
        "seconds": done - started,
        "parse_seconds": parsed_at - started,
        "analysis_seconds": done - parsed_at,
        "events": parsed.events,
        "parse_errors": sum(1 for issue in parsed.issues if issue.severity == "error"),
        "version": str(version),
        "table_seconds": analyzed.table_seconds,
    }


def analysis(version: Path, settings: Settings) -> dict:
    store = Warehouse(version.parent.parent.parent)
    started = time.perf_counter()
    summary = analyze_run(version.parent.name, version, store, settings)
    return {"seconds": time.perf_counter() - started, "rows": summary.rows, "table_seconds": summary.table_seconds}


def main() -> None:
    what, *paths, memory_mb = sys.argv[1:]
    settings = Settings(memory_mb=int(memory_mb))
    report = ingest(Path(paths[0]), Path(paths[1]), settings) if what == "ingest" else analysis(Path(paths[0]), settings)
    report["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(report))


if __name__ == "__main__":
    main()
