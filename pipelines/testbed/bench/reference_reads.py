"""The raw-read references of the benchmark: how fast can the same bytes merely be parsed?

Standalone (it imports nothing from wirespeed), so that it runs in whichever environment has the
parser: `python reference_reads.py <method> FILE...`. Each method parses every event and keeps
nothing, which is a lower bound for any tool that must also normalise and store them (`zcat`
only decompresses: the floor for gzip input). Prints one JSON line with the seconds taken.
"""

import json
import subprocess
import sys
import time
from multiprocessing import get_context

WORKERS = 2
EVENT_COLUMNS = {
    "ph": "VARCHAR", "cat": "VARCHAR", "name": "VARCHAR", "pid": "VARCHAR", "tid": "VARCHAR",
    "ts": "DECIMAL(22,3)", "dur": "DECIMAL(22,3)", "args": "JSON",
}


def _orjson_events(path: str) -> int:
    import orjson

    with open(path, "rb") as handle:
        return len(orjson.loads(handle.read())["traceEvents"])


def _simdjson_events(path: str) -> int:
    import simdjson

    with open(path, "rb") as handle:
        return len(simdjson.Parser().parse(handle.read())["traceEvents"])


def by_processes(count_events, paths: list[str], workers: int) -> int:
    with get_context("fork").Pool(min(workers, len(paths))) as pool:
        return sum(pool.map(count_events, paths))


def duckdb_read(paths: list[str], layout: str) -> int:
    """DuckDB's own JSON reader with the columns given, on whole Kineto files or on NDJSON."""
    import duckdb

    con = duckdb.connect()
    if layout == "newline_delimited":
        query = "SELECT count(*), count(ts), count(name), count(args) FROM read_json($paths, format := 'newline_delimited', columns := $columns)"
        parameters = {"paths": paths, "columns": EVENT_COLUMNS}
    else:
        events = "STRUCT(" + ", ".join(f'"{k}" {v}' for k, v in EVENT_COLUMNS.items()) + ")[]"
        query = (
            "SELECT count(*), count(e.ts), count(e.name), count(e.args) FROM ("
            "SELECT unnest(traceEvents) AS e FROM read_json($paths, format := 'unstructured', "
            "columns := $columns, maximum_object_size := 4294967295))"
        )
        parameters = {"paths": paths, "columns": {"traceEvents": events}}
    return con.execute(query, parameters).fetchall()[0][0]


METHODS = {
    "orjson": lambda paths: by_processes(_orjson_events, paths, WORKERS),
    "simdjson": lambda paths: by_processes(_simdjson_events, paths, 1),
    "duckdb_json": lambda paths: duckdb_read(paths, "whole"),
    "duckdb_ndjson": lambda paths: duckdb_read(paths, "newline_delimited"),
    "zcat": lambda paths: subprocess.run(["zcat", *paths], stdout=subprocess.DEVNULL, check=True).returncode,
}


def main() -> None:
    method, paths = sys.argv[1], sys.argv[2:]
    started = time.perf_counter()
    events = METHODS[method](paths)
    print(json.dumps({"seconds": time.perf_counter() - started, "events": events}))


if __name__ == "__main__":
    main()
