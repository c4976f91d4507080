"""Find a run's raw inputs by what its files are, whatever shape they come in.

A path given to ingest is one run: a single trace or log file, or a folder. A folder's files are
classified one by one, at its top and in every subfolder (the collector's `traces/`, `nccl/`,
`samples/`, `ranks/`, `hosts/`, or a folder per node copied from a cluster):

- Kineto traces: `.json` and `.json.gz` files (the trace parser reports any that is not one);
- NCCL logs: `.log`, `.txt`, `.out`, `.err` files, and any other file with a line near its start
  that only NCCL writes (a job's stdout saved without a suffix, a compressed log);
- counters: the collector's `net.<host>.csv` and `cpu.<host>.csv`;
- Flight Recorder dumps: JSON (`fr/rank<R>.json`, or any file that begins like one, such as
  torch's `nccl_trace_rank_<R>`), or torch's pickle of one, known by its first bytes (ingest loads
  it as plain values only, `pipelines.read.plain_pickle`); any other pickle is named, never loaded;
- the collector's `manifest.json` at the top, and `ranks/*.json` and `hosts/*.json`, which the
  manifest is made from: when a run died before its manifest was written, it is made from them;
- the collector's markers, `_DONE` and `hosts/.finishing`.

Every other file, and any subfolder that is a run folder of its own, is named in `parse_issues`
with the reason it was not read, so that nothing given to ingest is ignored without a word. A
folder is a collector run folder when it holds a manifest or any of the collector's subfolders;
its run id is the manifest's, else the folder's name; a file's is its name without suffixes.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from collectors import fr_format
from collectors import manifest as collector_manifest
from collectors import rundir
from pipelines.read.issues import ParseIssue

MANIFEST = rundir.MANIFEST
DONE_MARKER = rundir.DONE
TRACE_SUFFIXES = rundir.TRACE_SUFFIXES
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
COLLECTOR_FOLDERS = (rundir.TRACES, rundir.NCCL, "samples", rundir.RANKS, rundir.HOSTS, rundir.OUTPUT, rundir.FR)
_STRIP_SUFFIXES = (".gz", ".json", ".trace", ".pt", ".log", ".txt", ".out", ".err")
# A file of another name is an NCCL log if its start holds a line only NCCL writes: a debug line
# (whatever prefixes a launcher adds), a version banner, an nccl-tests header, a profiler-plugin
# record, a PyTorch watchdog line.
_SNIFF_BYTES = 64 << 10
_NCCL_LINE = re.compile(
    rb"\[\d+\] (?:\S+ )?NCCL (?:INFO|WARN|ERROR) |^NCCL version \d"
    rb"|^#\s+(?:nccl-tests|nThread|Collective test|Rank\s+\d+ Group|size\s+count)"
    rb'|"cat": "(?:COLL|GROUP|P2P)"|ProcessGroupNCCL',
    re.M,
)


@dataclass
class RunSource:
    run_id: str
    path: Path
    kind: str  # "collector", "trace folder", "trace file", "log folder", "log file", "flight recorder folder" or "... file"
    trace_files: list[Path]
    manifest: dict = field(default_factory=dict)
    issues: list[ParseIssue] = field(default_factory=list)
    nccl_log_files: list[Path] = field(default_factory=list)
    net_sample_files: list[Path] = field(default_factory=list)
    cpu_sample_files: list[Path] = field(default_factory=list)
    fr_dump_files: list[Path] = field(default_factory=list)  # JSON, or pickles of plain values
    # Values the user gave at ingest time (`--link-gbps`, ...), which win over the manifest's.
    overrides: dict = field(default_factory=dict)

    @property
    def input_bytes(self) -> int:
        """The bytes of the files whose reading dominates a parse: traces, NCCL logs, recorder dumps."""
        return sum(p.stat().st_size for p in self.trace_files + self.nccl_log_files + self.fr_dump_files if p.exists())


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
    """Describe the run at `path`: its id, kind, inputs and manifest, and every file it skips."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    run_id = run_id or run_id_for(path)
    if path.is_file():
        if fr_format.sniff(_head(path)):
            return RunSource(run_id, path, "flight recorder file", [], fr_dump_files=[path])
        if path.name.endswith(TRACE_SUFFIXES):
            return RunSource(run_id, path, "trace file", [path])
        return RunSource(run_id, path, "log file", [], nccl_log_files=[path])
    source = RunSource(run_id, path, "", [])
    described = False  # whether a ranks/ or hosts/ file was found
    for file in _files(path, source.issues):
        relative = file.relative_to(path)
        top, name = relative.parts[0], file.name
        if relative == Path(MANIFEST) or relative == Path(DONE_MARKER) or relative == Path(rundir.FINISH_CLAIM):
            continue
        if top in (rundir.RANKS, rundir.HOSTS) and len(relative.parts) == 2 and name.endswith(".json"):
            described = True
        elif name.startswith("."):
            source.issues.append(_skipped(file, "a hidden file"))
        elif name.endswith(".csv") and name.startswith(("net.", "cpu.")):
            (source.net_sample_files if name.startswith("net.") else source.cpu_sample_files).append(file)
        else:
            _classify(file, _head(file), source)
    collector = (path / MANIFEST).exists() or any((path / folder).is_dir() for folder in COLLECTOR_FOLDERS)
    if collector:
        source.kind = "collector"
        source.manifest = _read_manifest(path / MANIFEST, source.issues, described)
    elif source.trace_files or not (source.nccl_log_files or source.fr_dump_files):
        source.kind = "trace folder"
    else:
        source.kind = "log folder" if source.nccl_log_files else "flight recorder folder"
    return source


def _classify(file: Path, head: bytes, source: RunSource) -> None:
    """File a file that is not the collector's own by what its first bytes say it is."""
    name = file.name
    if fr_format.sniff(head):
        source.fr_dump_files.append(file)
    elif name.endswith(TRACE_SUFFIXES):
        source.trace_files.append(file)
    elif fr_format.is_pickle(head):
        source.issues.append(_skipped(file, "a pickle that is not a Flight Recorder dump (wirespeed loads no other)"))
    elif name.endswith(LOG_SUFFIXES) or _NCCL_LINE.search(head):
        source.nccl_log_files.append(file)
    else:
        source.issues.append(_skipped(file, "neither a trace, an NCCL log, a Flight Recorder dump, a counter sample nor a manifest"))


def _files(folder: Path, issues: list[ParseIssue]) -> list[Path]:
    """Every file under `folder`, in path order, but not inside another run's folder (named in `issues`)."""
    found = []
    for parent, folders, files in os.walk(folder):
        here = Path(parent)
        if here != folder and (here / MANIFEST).is_file():
            issues.append(ParseIssue(str(here), None, None, "warning",
                                     "a run folder of its own (it has a manifest.json): not read; ingest it as a run"))
            folders.clear()
            continue
        folders.sort()
        found += [here / name for name in sorted(files)]
    return found


def _skipped(file: Path, what: str) -> ParseIssue:
    return ParseIssue(str(file), None, None, "info", f"not read: {what}")


def _head(file: Path) -> bytes:
    """The file's first bytes, decompressed for gzip; nothing when it cannot be read (its parser says why)."""
    try:
        with open(file, "rb") as raw:
            head = raw.read(_SNIFF_BYTES)
        if head.startswith(b"\x1f\x8b"):
            with gzip.open(file, "rb") as unpacked:
                head = unpacked.read(_SNIFF_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile):
        return b""
    return head


def _read_manifest(path: Path, issues: list[ParseIssue], described: bool = False) -> dict:
    """The run's manifest; without one, what the ranks' and hosts' files say (`described`)."""
    if not path.exists():
        if not described:
            if path.parent.joinpath(rundir.TRACES).is_dir():
                issues.append(ParseIssue(str(path), None, None, "warning", "the run folder has no manifest.json"))
            return {}
        issues.append(ParseIssue(
            str(path), None, None, "warning",
            "the run folder has no manifest.json (did the run finish?): its ranks/ and hosts/ files were read instead",
        ))
        hosts = rundir.read_host_files(path.parent)
        launch = collector_manifest.merge_launches(hosts) if hosts else None
        built = collector_manifest.build(path.parent, path.parent.name, launch=launch)
        built.pop("run_id")
        return built
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
