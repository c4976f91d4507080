"""`python -m pipelines.testbed.bench` (or `make bench`): wirespeed's ingest against HTA and raw parsers.

For each size (ranks x MB per rank) it generates a trace set from a real trace (`synth`), a gzip
copy and an NDJSON twin of the same events, then runs every method in a process of its own
(`measure`) and prints a table: MB/s of uncompressed JSON, peak memory of the process tree, and
both against HTA. HTA runs in its own virtualenv (`--hta-venv`, created on first use), since its
pins differ from ours; the simdjson reference runs there too. The analysis-at-scale line times
the analysis SQL alone over the 8-rank set's events tiled to `--device-events` device events
(`scale`). Then the whole-process table (`whole`): `wirespeed ingest` as a user runs it against
HTA's whole analysis, in turn, on the real small traces and the generated sets; many small runs in
one ingest; the commands an analyst types after one; and a generated NCCL log against polars
alone. Generated sets are kept in `--work` and
reused.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.settings import Settings
from pipelines.testbed.bench import scale, synth, whole
from pipelines.testbed.bench.measure import Measured, run_measured
from pipelines.warehouse.store import Warehouse

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DEFAULT_SOURCE = REPO / "examples" / "nccl_data.json.gz"
# Real small traces for the whole-process table, where the shared traces are beside the clone.
SHARED_TRACES = REPO.parent / "shared" / "traces"
SMALL_TRACES = ("hta_sampled_2rank", "hta_single_rank_of_multirank/df_index_resolver_rank1_of2.json.gz")
REFERENCE_PACKAGES = ("traceinsight==0.6.1", "orjson==3.13.0", "pysimdjson==7.0.2")
MB = 10**6


@dataclass
class Row:
    size: str
    method: str
    data_bytes: int
    measured: Measured

    @property
    def mb_per_s(self) -> float | None:
        return self.data_bytes / MB / self.measured.seconds if self.measured.seconds else None


def main(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    reference_python = None if args.no_hta else _reference_venv(args.hta_venv)
    rows: list[Row] = []
    first_set: Path | None = None
    for size in args.sizes:
        ranks, mb = (int(part) for part in size.split("x"))
        sets = _trace_sets(args.source, args.work / size, ranks, mb * MB)
        first_set = first_set or sets["plain"]
        if not args.whole_only:
            rows += _measure_size(size, sets, args, reference_python)
    if args.device_events and first_set is not None and not args.whole_only:
        rows.append(_measure_analysis(first_set, args))
    if rows:
        _print_table(rows, args.memory_mb)
    if args.rounds:
        _whole_processes(args, reference_python)
    return 0


def _whole_processes(args, reference_python: Path | None) -> None:
    """The whole-process table: real small traces, then the generated sets (HTA on those it can load)."""
    inputs = [(f"{args.source.name} (real)", args.source)]
    inputs += [(f"{name.split('/')[-1]} (real)", SHARED_TRACES / name) for name in SMALL_TRACES if (SHARED_TRACES / name).exists()]
    timed = whole.compare(inputs, args.work, reference_python, args.rounds, args.timeout)
    for size in args.sizes:
        ranks, mb = (int(part) for part in size.split("x"))
        hta = reference_python if ranks * mb <= args.hta_max_mb else None
        timed += whole.compare([(f"{ranks} × {mb} MB", args.work / size / "plain")], args.work, hta, args.rounds, args.timeout)
    many = None
    if args.many_runs:
        many = (args.many_runs, *whole.many_runs(args.source, args.work, args.many_runs, args.timeout * 4))
    after = whole.commands_after(args.source, args.work, args.rounds, args.many_runs if many and not many[2] else 0)
    whole.print_tables(timed, args.rounds, many, after)
    if args.nccl_lines:
        whole.print_nccl_table(*whole.nccl_log(args.work, args.nccl_lines, args.rounds, args.timeout))


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipelines.testbed.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: s.split(","), default=["8x50", "2x400", "1x4000"],
                        help="comma-separated RANKSxMB sets (default 8x50,2x400,1x4000)")
    parser.add_argument("--work", type=Path, default=REPO / "bench-data", help="where sets and warehouses go")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real Kineto trace to tile")
    parser.add_argument("--hta-venv", type=Path, default=REPO / "bench-data" / "reference-venv")
    parser.add_argument("--no-hta", action="store_true", help="skip HTA and simdjson (no reference virtualenv)")
    parser.add_argument("--no-references", action="store_true", help="skip the raw-read references")
    parser.add_argument("--device-events", type=int, default=10_000_000,
                        help="device events for the analysis-at-scale line; 0 skips it")
    parser.add_argument("--memory-mb", type=int, default=Settings.memory_mb,
                        help=f"DuckDB's memory limit for wirespeed, as [resources] memory_mb (default {Settings.memory_mb})")
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a method is given up (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="whole-process rounds, methods in turn (default 3; 0 skips)")
    parser.add_argument("--hta-max-mb", type=int, default=1000,
                        help="whole processes: HTA only on sets up to this many MB (default 1000; it cannot load 4 GB)")
    parser.add_argument("--many-runs", type=int, default=100, help="small runs in one ingest (default 100; 0 skips)")
    parser.add_argument("--nccl-lines", type=int, default=600_000,
                        help="whole processes: lines of the generated NCCL log (default 600000, 120 MB; 0 skips)")
    parser.add_argument("--whole-only", action="store_true", help="only the whole-process table")
    return parser


def _reference_venv(venv: Path) -> Path:
    """The Python of a virtualenv with HTA, orjson and simdjson, made once."""
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if not stamp.exists() or stamp.read_text() != " ".join(REFERENCE_PACKAGES):
        print(f"installing {', '.join(REFERENCE_PACKAGES)} into {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *REFERENCE_PACKAGES], check=True)
        stamp.write_text(" ".join(REFERENCE_PACKAGES))
    return python


def _trace_sets(source: Path, folder: Path, ranks: int, bytes_per_rank: int) -> dict[str, Path]:
    """The plain, gzip and NDJSON versions of one set, generated unless already there."""
    sets = {"plain": folder / "plain", "gzip": folder / "gzip", "ndjson": folder / "ndjson"}
    done = folder / ".complete"
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {ranks} x {bytes_per_rank // MB} MB in {folder} ...", file=sys.stderr)
        paths = synth.generate(source, sets["plain"], ranks, bytes_per_rank, sets["ndjson"])
        synth.gzip_copies(paths, sets["gzip"])
        done.touch()
    return sets


def _files(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.iterdir() if p.is_file())


def _measure_size(size: str, sets: dict[str, Path], args, reference_python: Path | None) -> list[Row]:
    plain_files = _files(sets["plain"])
    data = sum(Path(p).stat().st_size for p in plain_files)
    here = sys.executable
    references = REPO / "pipelines" / "bench" / "reference_reads.py"
    # (method, the set it reads, its command)
    methods: list[tuple[str, str, list[str]]] = [
        ("wirespeed ingest", "plain", _ingest(sets["plain"], args.work / size / "warehouse-plain", args.memory_mb)),
        ("wirespeed ingest (.json.gz)", "gzip", _ingest(sets["gzip"], args.work / size / "warehouse-gzip", args.memory_mb)),
    ]
    if reference_python is not None:
        methods.append(("HTA TraceAnalysis()", "plain", [str(reference_python), str(HERE / "hta_load.py"), str(sets["plain"])]))
    if not args.no_references:
        methods += [
            ("orjson.loads, 2 processes", "plain", [here, str(references), "orjson", *plain_files]),
            ("DuckDB read_json, whole file", "plain", [here, str(references), "duckdb_json", *plain_files]),
            ("DuckDB read_json, NDJSON", "ndjson", [here, str(references), "duckdb_ndjson", *_files(sets["ndjson"])]),
            ("gunzip (zcat)", "gzip", [here, str(references), "zcat", *_files(sets["gzip"])]),
        ]
        if reference_python is not None:
            methods.append(("simdjson, 1 process", "plain", [str(reference_python), str(references), "simdjson", *plain_files]))
    rows = []
    for name, inputs, command in methods:
        print(f"{size}: {name} ...", file=sys.stderr)
        whole.warm(sets[inputs])
        rows.append(Row(size, name, data, _kept_every_rank(run_measured(command, args.timeout), len(plain_files))))
    return rows


def _kept_every_rank(measured: Measured, ranks: int) -> Measured:
    """A load that kept fewer ranks than it was given is no comparison: HTA, finding no rank in a
    file, files it as rank 0 and silently keeps one such file."""
    kept = measured.report.get("ranks")
    if kept is not None and kept != ranks:
        return Measured(None, measured.peak_bytes, measured.report, f"kept {kept} of {ranks} ranks")
    return measured


def _ingest(run_dir: Path, warehouse: Path, memory_mb: int) -> list[str]:
    shutil.rmtree(warehouse, ignore_errors=True)
    return [sys.executable, "-m", "pipelines.testbed.bench.children", "ingest", str(run_dir), str(warehouse), str(memory_mb)]


def _measure_analysis(first_set: Path, args) -> Row:
    """Tile the first set's parsed events to `--device-events` and time the analysis alone."""
    parsed = next((args.work / first_set.parent.name / "warehouse-plain" / "versions").glob("*/*"))
    store = Warehouse(args.work / "warehouse-scale")
    shutil.rmtree(store.root, ignore_errors=True)
    store.ensure()
    version = store.start_version("scaled", "bench", ())
    print(f"tiling events to {args.device_events:,} device events ...", file=sys.stderr)
    scale.scaled_version(parsed, version, args.device_events)
    size = f"{args.device_events / 1e6:g}M device events"
    command = [sys.executable, "-m", "pipelines.testbed.bench.children", "analysis", str(version), str(args.memory_mb)]
    measured = run_measured(command, args.timeout)
    return Row(size, "wirespeed analysis SQL alone", 0, measured)


def _print_table(rows: list[Row], memory_mb: int) -> None:
    hta = {row.size: row for row in rows if row.method.startswith("HTA") and row.measured.seconds}
    plain = {row.size: row for row in rows if row.method == "wirespeed ingest" and row.measured.seconds}
    print(f"\nwirespeed benchmark, {time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, wirespeed with {memory_mb} MB of DuckDB memory\n")
    print("| set | method | MB/s | peak memory | peak ÷ data | vs HTA |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        m = row.measured
        if m.failure:
            print(f"| {row.size} | {row.method} | failed: {m.failure} | | | |")
            continue
        if not row.data_bytes:
            print(f"| {row.size} | {row.method} | {m.seconds:.1f} s | {m.peak_bytes / 1e9:.2f} GB | | |")
            continue
        base = hta.get(row.size)
        versus = f"{row.mb_per_s / base.mb_per_s:.1f}×" if base and row.mb_per_s else ""
        print(f"| {row.size} | {row.method} | {row.mb_per_s:.0f} | {m.peak_bytes / 1e9:.2f} GB "
              f"| {m.peak_bytes / row.data_bytes:.2f} | {versus} |")
    for row in rows:
        spent = row.measured.report.get("table_seconds")
        if spent and row.method.startswith("wirespeed analysis"):
            top = sorted(spent.items(), key=lambda item: -item[1])[:6]
            print(f"\n{row.size}: analysis time by table: " + ", ".join(f"{name} {sec:.1f} s" for name, sec in top))
    for size, row in plain.items():
        gz = next((r for r in rows if r.size == size and r.method.endswith("(.json.gz)") and r.measured.seconds), None)
        if gz:
            print(f"\n{size}: .json.gz takes {gz.measured.seconds / row.measured.seconds:.2f}× the plain time; "
                  f"plain ingest = parse {row.measured.report['parse_seconds']:.2f} s + analysis "
                  f"{row.measured.report['analysis_seconds']:.2f} s, {row.measured.report['events']:,} events")


if __name__ == "__main__":
    sys.exit(main())
