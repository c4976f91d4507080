"""Whole processes, as a user waits for them: `wirespeed ingest` against HTA's whole analysis.

Each round runs every method once on every input, in turn (A B A B ...), each as a fresh process:
`wirespeed ingest PATH --warehouse FRESH --quiet` (start-up, parse, analysis, report and
roll-ups), wirespeed's parser alone (`parser_alone.py`: the ceiling of the ratio to HTA for any
ingest built on its JSON reader), and HTA's `TraceAnalysis()` with its communication/computation
overlap and temporal breakdown (`hta_whole.py`, imports included). Medians over rounds, and the
median of each round's ratio to HTA, go in the table. Also timed here: many small runs in one
ingest, the commands an analyst types after one (`report`, `sql`, `--help`), and a large NCCL
debug log (`nccl_log.py`) through `wirespeed ingest` against polars alone reading and splitting
its lines (`nccl_polars.py`), the ceiling for that ingest.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.testbed.bench.measure import tree_rss_bytes

HERE = Path(__file__).resolve().parent
WIRESPEED = str(Path(sys.executable).with_name("wirespeed"))
POLL_S = 0.01
HTA = "HTA whole analysis"
# The ceiling of the ratio to HTA for any ingest on wirespeed's JSON reader (parser_alone.py).
PARSER_ALONE = "its parser alone (cut and read, nothing kept)"
POLARS_ALONE = "polars alone (read and split the lines)"
NCCL_INGEST = "`wirespeed ingest` of the log"
# A user's Python keeps the bytecode of what it imported; a shell that forbids writing it would
# charge every round the compiling of the package's modules (installed libraries come compiled).
USER_ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


@dataclass
class Timed:
    """One method on one input over every round: wall seconds and peak memory of each round."""

    label: str
    method: str
    path: Path
    seconds: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    failure: str | None = None

    def record(self, seconds: float | None, peak: int, failure: str | None) -> None:
        self.peaks.append(peak)
        if failure:
            self.failure = failure
        else:
            self.seconds.append(seconds)

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds and not self.failure else None


def run_whole(command: list[str], timeout_s: float) -> tuple[float | None, int, str | None]:
    """Wall seconds from start to exit, peak memory of the process tree, and why it failed, if it did."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=USER_ENV)
    peak = 0
    while True:
        peak = max(peak, tree_rss_bytes(child.pid))
        try:
            child.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            if time.perf_counter() - started > timeout_s:
                child.kill()
                child.wait()
                return None, peak, f"did not finish in {timeout_s:.0f} s"
    seconds = time.perf_counter() - started
    error = child.stderr.read() if child.stderr else ""
    if child.returncode != 0:
        return None, peak, (error.strip().splitlines() or [f"exit status {child.returncode}"])[-1][:200]
    return seconds, peak, None


def warm(path: Path) -> None:
    """Read an input once, so that each method finds it in the page cache: another method's
    gigabytes of memory may have pushed it out since its last round."""
    for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if file.is_file():
            with open(file, "rb") as handle:
                while handle.read(8 << 20):
                    pass


def hta_folder(path: Path, work: Path) -> Path:
    """HTA reads folders: a folder holding a link to `path` when it is a file."""
    if path.is_dir():
        return path
    folder = work / "hta-inputs" / path.name.split(".")[0]
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / path.name
    if not link.exists():
        link.symlink_to(path.absolute())
    return folder


def compare(inputs: list[tuple[str, Path]], work: Path, hta_python: Path | None, rounds: int, timeout_s: float) -> list[Timed]:
    """Every input through `wirespeed ingest`, its parser alone and, given its Python, HTA, in turn, `rounds` times."""
    timed: list[Timed] = []
    plan = []
    for label, path in inputs:
        warehouse = work / "whole-warehouse"
        mine = Timed(label, "wirespeed ingest", path)
        plan.append((mine, [WIRESPEED, "ingest", str(path), "--warehouse", str(warehouse), "--quiet"], warehouse))
        parser = Timed(label, PARSER_ALONE, path)
        plan.append((parser, [sys.executable, "-m", "pipelines.testbed.bench.parser_alone", str(path)], None))
        timed += [mine, parser]
        if hta_python is not None:
            theirs = Timed(label, HTA, path)
            plan.append((theirs, [str(hta_python), str(HERE / "hta_whole.py"), str(hta_folder(path, work))], None))
            timed.append(theirs)
    _in_turn(plan, rounds, timeout_s)
    return timed


def _in_turn(plan: list[tuple[Timed, list[str], Path | None]], rounds: int, timeout_s: float) -> None:
    """Each round, every (entry, command, fresh warehouse) once, in order; a failed entry drops out."""
    for round_number in range(rounds):
        for entry, command, warehouse in plan:
            if entry.failure:
                continue
            print(f"whole process, round {round_number + 1}: {entry.label}: {entry.method} ...", file=sys.stderr)
            if warehouse is not None:
                shutil.rmtree(warehouse, ignore_errors=True)
            warm(entry.path)
            entry.record(*run_whole(command, timeout_s))


def many_runs(source: Path, work: Path, count: int, timeout_s: float) -> tuple[float | None, str | None]:
    """`count` small runs (run folders of ten jobs, each holding `source`) in one `wirespeed ingest`,
    into the warehouse `commands_after` reports from again."""
    landing = work / f"many-{count}"
    if not (landing / ".complete").exists():
        shutil.rmtree(landing, ignore_errors=True)
        for index in range(count):
            folder = landing / _many_run_id(index)
            (folder / "traces").mkdir(parents=True)
            (folder / "traces" / source.name).symlink_to(source.absolute())
            (folder / "manifest.json").write_text(json.dumps({"run_id": folder.name, "job": f"job-{index % 10}"}))
        (landing / ".complete").touch()
    warehouse = _many_warehouse(work)
    shutil.rmtree(warehouse, ignore_errors=True)
    folders = sorted(str(p) for p in landing.iterdir() if p.is_dir())
    seconds, _, failure = run_whole([WIRESPEED, "ingest", *folders, "--warehouse", str(warehouse), "--quiet"], timeout_s)
    return seconds, failure


def _many_run_id(index: int) -> str:
    return f"run-{index:04d}"


def _many_warehouse(work: Path) -> Path:
    return work / "many-warehouse"


def commands_after(path: Path, work: Path, rounds: int, many: int = 0) -> list[Timed]:
    """What an analyst runs after an ingest: the report, a small query, the help; with `many`, the
    report again in the warehouse of that many runs that `many_runs` left, whose cost should not
    grow with the warehouse."""
    warehouse = work / "after-warehouse"
    shutil.rmtree(warehouse, ignore_errors=True)
    subprocess.run([WIRESPEED, "ingest", str(path), "--warehouse", str(warehouse), "--run-id", "after", "--quiet"],
                   check=True, capture_output=True)
    commands = [
        ("wirespeed report RUN", [WIRESPEED, "report", "after", "--warehouse", str(warehouse)]),
        ("wirespeed sql (one small query)", [WIRESPEED, "sql", "SELECT count(*) FROM steps", "--warehouse", str(warehouse)]),
        ("wirespeed --help", [WIRESPEED, "--help"]),
    ]
    if many:
        commands.insert(1, (f"wirespeed report RUN, in the {many}-run warehouse",
                            [WIRESPEED, "report", _many_run_id(0), "--warehouse", str(_many_warehouse(work))]))
    timed = [Timed(path.name, label, path) for label, _ in commands]
    _in_turn([(entry, command, None) for entry, (_, command) in zip(timed, commands)], rounds, 120)
    return timed


def nccl_log(work: Path, lines: int, rounds: int, timeout_s: float) -> tuple[list[Timed], int, int | None]:
    """A generated one-node log of `lines` lines through `wirespeed ingest` and polars alone, in
    turn; also the calls written and how many of them nccl_calls holds after the last ingest."""
    from pipelines.testbed.bench import nccl_log as generator
    from pipelines.warehouse.store import Warehouse

    folder = work / f"nccl-{lines}"
    log, done = folder / "node07.log", folder / ".complete"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"generating an NCCL log of {lines:,} lines in {log} ...", file=sys.stderr)
        done.write_text(str(generator.generate(log, lines)))
    warehouse = folder / "warehouse"
    label = f"NCCL log, {lines:,} lines, {log.stat().st_size / 1e6:.0f} MB"
    mine, theirs = Timed(label, NCCL_INGEST, log), Timed(label, POLARS_ALONE, log)
    _in_turn([
        (mine, [WIRESPEED, "ingest", str(log), "--warehouse", str(warehouse), "--quiet"], warehouse),
        (theirs, [sys.executable, "-m", "pipelines.testbed.bench.nccl_polars", str(log), str(folder / "polars.parquet")], None),
    ], rounds, timeout_s)
    kept = None
    if not mine.failure:
        con = Warehouse(warehouse).connect(tables=("nccl_calls",))
        try:
            kept = con.execute("SELECT count(*) FROM nccl_calls").fetchall()[0][0]
        finally:
            con.close()
    return [mine, theirs], int(done.read_text()), kept


def print_nccl_table(timed: list[Timed], calls: int, kept: int | None) -> None:
    mine, theirs = timed
    print(f"\n{mine.label}: whole processes in turn (medians; ratio = median of each round's wirespeed ÷ polars)\n")
    print("| method | seconds | MB/s | peak memory | ÷ polars alone |\n|---|---|---|---|---|")
    size = mine.path.stat().st_size / 1e6
    for entry in timed:
        if entry.failure:
            print(f"| {entry.method} | failed: {entry.failure} | | | |")
            continue
        ratio = ""
        if entry is mine and theirs.median:
            ratio = f"{statistics.median(m / t for m, t in zip(mine.seconds, theirs.seconds)):.2f}×"
        print(f"| {entry.method} | {entry.median:.2f} | {size / entry.median:.0f} | {max(entry.peaks) / 1e6:.0f} MB | {ratio} |")
    print(f"\ncalls in the log: {calls:,}; in nccl_calls: {'?' if kept is None else f'{kept:,}'}")


def print_tables(timed: list[Timed], rounds: int, many: tuple[int, float | None, str | None] | None, after: list[Timed]) -> None:
    print(f"\nWhole processes, {rounds} rounds in turn (medians; ratio = median of each round's HTA ÷ wirespeed)\n")
    print("| input | method | seconds | peak memory | HTA ÷ wirespeed |")
    print("|---|---|---|---|---|")
    for entry in timed:
        if entry.failure:
            print(f"| {entry.label} | {entry.method} | failed: {entry.failure} | | |")
            continue
        ratio = ""
        if entry.method != HTA:
            hta = next((t for t in timed if t.label == entry.label and t.method == HTA and t.median), None)
            if hta:
                ratio = f"{statistics.median(h / w for h, w in zip(hta.seconds, entry.seconds)):.2f}×"
        spread = f" ({min(entry.seconds):.2f}–{max(entry.seconds):.2f})" if len(entry.seconds) > 1 else ""
        print(f"| {entry.label} | {entry.method} | {entry.median:.2f}{spread} | {max(entry.peaks) / 1e9:.2f} GB | {ratio} |")
    if many:
        count, seconds, failure = many
        result = f"failed: {failure}" if failure else f"{seconds:.1f} s, {seconds / count:.2f} s per run"
        print(f"\n{count} small runs in one `wirespeed ingest`: {result}")
    if after:
        print("\n| after an ingest | seconds |\n|---|---|")
        for entry in after:
            print(f"| {entry.method} | {'failed: ' + entry.failure if entry.failure else f'{entry.median:.2f}'} |")
