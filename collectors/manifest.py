"""The run manifest: the run as a whole, assembled from what each rank wrote about itself."""

from __future__ import annotations

import time
from pathlib import Path

from collectors import rundir


def build(run_dir: Path, run_id: str, tags: dict | None = None, launch: dict | None = None) -> dict:
    """Merge the ranks' self-descriptions into one manifest.

    The link rate of a run is its slowest host's: a ring all-reduce runs at the pace of its
    slowest link.
    """
    ranks = rundir.read_rank_files(run_dir)
    launches = (launch or {}).get("launches", [])
    known_links = [r for r in ranks if isinstance(r.get("link_gbps"), (int, float))]
    slowest = min(known_links, key=lambda r: r["link_gbps"], default=None)
    first = ranks[0] if ranks else {}
    merged_tags = {}
    for r in ranks:
        merged_tags.update(r.get("tags") or {})
    merged_tags.update(tags or {})
    world_sizes = [r["world_size"] for r in ranks if isinstance(r.get("world_size"), int)]
    manifest = {
        "run_id": run_id,
        "world_size": max(world_sizes) if world_sizes else None,
        "hosts": sorted({r["host"] for r in ranks if r.get("host")} | {h["launcher_host"] for h in launches if h.get("launcher_host")}),
        "backend": first.get("backend"),
        "torch_version": first.get("torch_version"),
        "nccl_version": first.get("nccl_version"),
        "cuda_version": first.get("cuda_version"),
        "device_model": first.get("device_model"),
        "link_gbps": slowest["link_gbps"] if slowest else None,
        "link_source": slowest.get("link_source") if slowest else None,
        "link_interface": (slowest or first).get("link_interface"),
        "intra_link_gbps": first.get("intra_link_gbps"),
        "intra_link_source": first.get("intra_link_source"),
        "sampling": [r["sampling"] | {"host": r.get("host")} for r in ranks if r.get("sampling")],
        "tags": merged_tags,
        "ranks": [
            {k: r.get(k) for k in ("rank", "local_rank", "host", "pid", "device_model", "link_gbps", "link_source", "link_interface", "traces")}
            for r in sorted(ranks, key=lambda r: r.get("rank", 0))
        ],
        "failures": [f | {"rank": r.get("rank")} for r in ranks for f in r.get("failures", [])],
        "written_ns": time.time_ns(),
    }
    manifest.update(launch or {})
    return manifest


def merge_launches(launches: list[dict]) -> dict:
    """One launch record for the run from every host's, in host order.

    The run started with its first host and ended with its last; it failed if any host's command
    failed. Command, zone and launcher are the first host's (each host's own are in `launches`).
    """
    first = launches[0]
    failed = [h["exit_code"] for h in launches if h.get("exit_code") != 0]
    return {
        "command": first.get("command"),
        "utc_offset_s": first.get("utc_offset_s"),
        "launcher_host": first.get("launcher_host"),
        "started_ns": min(h["started_ns"] for h in launches),
        "ended_ns": max(h["ended_ns"] for h in launches),
        "exit_code": failed[0] if failed else 0,
        "sampling": [s for h in launches for s in h.get("sampling", [])],
        "job_traces": [t | {"host": h.get("launcher_host")} for h in launches for t in h.get("job_traces", [])],
        "launches": launches,
    }


def finish(run_dir: Path, run_id: str, tags: dict | None = None, launch: dict | None = None) -> dict:
    """Write manifest.json, then the `_DONE` marker: from here on the run may be ingested."""
    manifest = build(run_dir, run_id, tags, launch)
    rundir.write_json_atomically(run_dir / rundir.MANIFEST, manifest)
    (run_dir / rundir.DONE).write_text(f"{time.time_ns()}\n")
    return manifest
