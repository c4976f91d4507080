"""The job's own traces: what a job that profiles itself wrote to its own folders while it ran.

A job that profiles itself the usual way (`tensorboard_trace_handler("outputs/traces")`,
torchtitan's `save_traces_folder`) writes its traces where it always did. `wirespeed collect
--traces DIR` (repeatable, a glob allowed) names those folders: before the job starts, the trace
files already there are noted (path, size and time of change); once it has ended, every trace file
there that is new or changed is copied into the run folder, under `traces/<host>/<DIR>/`, so that
older runs' traces in the same folder are left out whatever the clocks say. The job's own files are
never moved or changed. Each copy is listed in the host's launch record (`job_traces`: where it
came from, where it went, its size), and so in the manifest.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from collectors import rundir

Snapshot = dict[str, tuple[int, int]]  # absolute path: (size, mtime_ns)


def snapshot(patterns: list[str]) -> Snapshot:
    """The trace files under `patterns` now, to tell the job's new ones from older ones."""
    seen: Snapshot = {}
    for _, files in _matches(patterns):
        for path in files:
            try:
                state = path.stat()
            except OSError:
                continue
            seen[str(path)] = (state.st_size, state.st_mtime_ns)
    return seen


def take(patterns: list[str], before: Snapshot, run_dir: Path, host: str) -> list[dict]:
    """Copy the trace files written under `patterns` since `before` into `run_dir`; what was copied."""
    taken = []
    run_dir = run_dir.absolute()
    for folder, files in _matches(patterns):
        label = _label(folder)
        for path in files:
            if run_dir in path.parents:
                continue  # the run folder itself, when a pattern covers it
            try:
                state = path.stat()
            except OSError:
                continue
            if before.get(str(path)) == (state.st_size, state.st_mtime_ns):
                continue
            target = run_dir / rundir.TRACES / host / label / path.relative_to(folder)
            if target.exists():
                continue  # two patterns that name one folder
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            taken.append({"source": str(path), "file": str(target.relative_to(run_dir)), "bytes": state.st_size})
    return taken


def _matches(patterns: list[str]) -> list[tuple[Path, list[Path]]]:
    """(folder, trace files under it) for each folder a pattern names; a file named by a pattern
    counts as its folder's."""
    found = []
    for pattern in patterns:
        for match in sorted(glob.glob(os.path.expanduser(pattern), recursive=True)):
            path = Path(match).absolute()
            if path.is_dir():
                files = [p for p in sorted(path.rglob("*")) if p.is_file() and p.name.endswith(rundir.TRACE_SUFFIXES)]
                found.append((path, files))
            elif path.is_file() and path.name.endswith(rundir.TRACE_SUFFIXES):
                found.append((path.parent, [path]))
    return found


def _label(folder: Path) -> str:
    """The folder's name inside the run folder: its path from the working directory, `/` as `_`."""
    try:
        shown = folder.relative_to(Path.cwd())
    except ValueError:
        shown = folder
    return "_".join(part for part in shown.parts if part not in ("/", "..")) or "."
