"""The run folder's layout, shared by the in-job API and the launcher (no torch, no dagster).

    <landing>/<run_id>/
        traces/rank<R>.pt.trace.json      one profiler trace per rank (per cycle: rank<R>.cycle<K>...)
        traces/<host>/<DIR>/...           the job's own traces, taken by `wirespeed collect --traces DIR`
        ranks/rank<R>.json               what each rank knows about itself (host, device, link, failures)
        nccl/nccl.<host>.<pid>.log        NCCL debug log, one per process
        fr/rank<R>.json                  the rank's Flight Recorder dump, JSON (rank<R>.nccl.json: NCCL's)
        samples/{net,cpu}.<host>.csv      network and CPU counters, sampled on one process per host
        hosts/<host>.json                 each host's `wirespeed collect`: command, exit code, times
        output/<host>.log                 the job's own output, when collected quietly (the demo)
        manifest.json                    the run as a whole, written once every rank has finished
        _DONE                            written last; the pipeline ingests nothing before it
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

TRACES = "traces"
RANKS = "ranks"
NCCL = "nccl"
FR = "fr"
HOSTS = "hosts"
OUTPUT = "output"
# Created exclusively by the one launcher that writes the manifest of a multi-host run.
FINISH_CLAIM = "hosts/.finishing"
MANIFEST = "manifest.json"
DONE = "_DONE"
# A trace file's name ends so (Kineto's `.pt.trace.json`, torch.profiler's `.json.gz` export).
TRACE_SUFFIXES = (".json", ".json.gz")

# Set by `wirespeed collect` for the training processes it starts.
ENV_RUN_DIR = "WIRESPEED_RUN_DIR"
ENV_RUN_ID = "WIRESPEED_RUN_ID"
ENV_LAUNCHER = "WIRESPEED_LAUNCHER"
ENV_LINK_GBPS = "WIRESPEED_LINK_GBPS"
ENV_INTRA_LINK_GBPS = "WIRESPEED_INTRA_LINK_GBPS"


def write_json_atomically(path: Path, data: dict) -> None:
    """Write JSON so that a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    temporary.write_text(json.dumps(data, indent=2, sort_keys=True, default=str))
    os.replace(temporary, path)


def has_traces(run_dir: Path) -> bool:
    """Whether the run folder holds any trace file (Capture's, or the job's own taken by `--traces`)."""
    return any(p.is_file() and p.name.endswith(TRACE_SUFFIXES) for p in (run_dir / TRACES).rglob("*"))


def read_rank_files(run_dir: Path) -> list[dict]:
    """Every rank's self-description, skipping any that cannot be read."""
    return _read_json_files(run_dir / RANKS, "rank*.json")


def read_host_files(run_dir: Path) -> list[dict]:
    """Every host's launch record, in host name order, skipping any that cannot be read."""
    return _read_json_files(run_dir / HOSTS, "*.json")


def _read_json_files(folder: Path, pattern: str) -> list[dict]:
    """The JSON files of `folder` matching `pattern`, in name order, skipping any that cannot be read."""
    found = []
    for path in sorted(folder.glob(pattern)):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    return found


def inside(run_dir: Path, name: str) -> Path:
    """`run_dir / name`, refusing any name that would leave the run folder."""
    target = (run_dir / name).resolve()
    if run_dir.resolve() not in target.parents:
        raise ValueError(f"{name!r} is not a path inside the run folder")
    return target
