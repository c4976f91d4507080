"""The most any ingest built on wirespeed's parser could reach: its cutting and DuckDB's JSON
reading alone, as a whole process (`python -m pipelines.testbed.bench.parser_alone PATH`).

Each trace file of the run is cut into chunks and every event read into the columns wirespeed
reads, as `wirespeed ingest` does (one file per core, each on its own cursor), and then nothing:
no normalising, no Parquet, no analysis, no report. HTA's time over this process's is the ratio no
change to the rest of wirespeed can pass without a faster JSON reader.
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipelines.read.kineto import normalize
from pipelines.read.kineto.fields import FAST_TIME_TYPE, event_json_columns
from pipelines.read.sources import discover
from pipelines.settings import Settings
from pipelines.warehouse import sql

# Every column, so that DuckDB must build each one; the hash keeps nothing.
READ_EVERY_COLUMN = """
SELECT count(*), max(hash(ph, cat, name, pid, tid, ts, dur, args))
FROM read_json($chunks, format := $format, columns := $columns)
"""


def read_file(path: Path, work: Path, settings: Settings) -> int:
    """Cut one trace file and read its events; the number of events read."""
    trace = normalize.read_trace(path, work)
    con = sql.session(settings.duckdb_config())
    try:
        chunks = [str(chunk) for chunk in trace.chunk_paths]
        values = {"chunks": chunks, "format": trace.json_format, "columns": event_json_columns(FAST_TIME_TYPE)}
        return con.execute(READ_EVERY_COLUMN, values).fetchall()[0][0]
    finally:
        con.close()
        normalize.cleanup(work)


def main() -> None:
    files = discover(Path(sys.argv[1])).trace_files
    settings = Settings()
    with tempfile.TemporaryDirectory(prefix="wirespeed-parser-") as work:
        with ThreadPoolExecutor(max_workers=settings.threads) as pool:
            events = sum(pool.map(lambda index: read_file(files[index], Path(work) / str(index), settings), range(len(files))))
    print(events)


if __name__ == "__main__":
    main()
