"""Find a run's raw inputs, whatever shape they come in.

Three shapes are accepted:
- a collector run folder (`manifest.json`, `traces/`, `nccl/`, `samples/`, `_DONE`), written by
  `collectors`;
- a bare folder of Kineto traces from elsewhere (tensorboard_trace_handler or export_chrome_trace
  output, `.json` or `.json.gz`) and/or NCCL logs (`.log`, `.txt`, `.out`, `.err`); its run id is
  the folder's name;
- a single trace file or log file; its run id is the file name without its suffixes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.issues import ParseIssue

MANIFEST = "manifest.json"
DONE_MARKER = "_DONE"
TRACE_SUFFIXES = (".json", ".json.gz")
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
_STRIP_SUFFIXES = (".gz", ".json", ".trace", ".pt", ".log", ".txt", ".out", ".err")


@dataclass
class RunSource:
    run_id: str
    path: Path
    kind: str  # "collector", "trace folder", "trace file", "log folder" or "log file"
    trace_files: list[Path]
    manifest: dict = field(default_factory=dict)
    issues: list[ParseIssue] = field(default_factory=list)
    nccl_log_files: list[Path] = field(default_factory=list)
    net_sample_files: list[Path] = field(default_factory=list)
    cpu_sample_files: list[Path] = field(default_factory=list)
    # Values the user gave at ingest time (`--link-gbps`, ...), which win over the manifest's.
    overrides: dict = field(default_factory=dict)


def run_id_for(path: Path) -> str:
    """The run id a path gets unless told otherwise: a manifest's, a folder's or a file's name."""
    path = Path(path)
    if path.is_dir():
        manifest = _read_manifest(path / MANIFEST, [])
        run_id = manifest.get("run_id")
        return run_id if isinstance(run_id, str) and run_id else path.absolute().name
    name = path.name
    stripped = True
    while stripped:
        stripped = False
        for suffix in _STRIP_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, stripped = name[: -len(suffix)], True
    return name


def discover(path: Path, run_id: str | None = None) -> RunSource:
    """Describe the run at `path`: its id, kind, trace files and manifest."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    run_id = run_id or run_id_for(path)
    if path.is_file():
        if path.name.endswith(TRACE_SUFFIXES):
            return RunSource(run_id, path, "trace file", [path])
        return RunSource(run_id, path, "log file", [], nccl_log_files=[path])
    issues: list[ParseIssue] = []
    manifest_path = path / MANIFEST
    if manifest_path.exists() or (path / "traces").is_dir():
        manifest = _read_manifest(manifest_path, issues)
        traces = _trace_files(path / "traces")
        samples = path / "samples"
        logs = sorted(p for p in (path / "nccl").glob("*") if p.is_file() and not p.name.startswith("."))
        return RunSource(
            run_id, path, "collector", traces, manifest, issues,
            logs, sorted(samples.glob("net.*.csv")), sorted(samples.glob("cpu.*.csv")),
        )
    traces = _trace_files(path)
    logs = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(LOG_SUFFIXES) and not p.name.startswith("."))
    return RunSource(run_id, path, "trace folder" if traces or not logs else "log folder", traces, {}, issues, logs)


def _trace_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.iterdir()
        if p.is_file() and p.name != MANIFEST and p.name.endswith(TRACE_SUFFIXES) and not p.name.startswith(".")
    )


def _read_manifest(path: Path, issues: list[ParseIssue]) -> dict:
    if not path.exists():
        if path.parent.joinpath("traces").is_dir():
            issues.append(ParseIssue(str(path), None, None, "warning", "the run folder has no manifest.json"))
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as bad:
        line = getattr(bad, "lineno", None)
        issues.append(ParseIssue(str(path), line, None, "error", f"manifest.json does not parse: {bad}"))
        return {}
    if not isinstance(manifest, dict):
        issues.append(ParseIssue(str(path), 1, None, "error", "manifest.json is not a JSON object"))
        return {}
    return manifest


def is_complete_run(folder: Path) -> bool:
    """Collector run folders are complete once every rank finished and `_DONE` was written last."""
    return (folder / DONE_MARKER).is_file()
