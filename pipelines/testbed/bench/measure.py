"""Run one benchmark method in a process of its own and watch the memory of its process tree.

Each method runs alone so that its peak memory is its own. The child prints one JSON line with the
seconds of its timed section (imports and setup excluded, for every method alike); the parent
samples the resident memory of the child and all its descendants every 50 ms, which also counts
the worker processes HTA and the orjson reference start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Measured:
    """One method's run: the child's report, or why it failed."""

    seconds: float | None
    peak_bytes: int
    report: dict = field(default_factory=dict)
    failure: str | None = None


def run_measured(command: list[str], timeout_s: float = 3600, env: dict | None = None) -> Measured:
    """Run `command`, sampling its tree's memory; its last stdout line is its JSON report."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = 0
    deadline = time.monotonic() + timeout_s
    gave_up = False
    while child.poll() is None:
        peak = max(peak, tree_rss_bytes(child.pid))
        if time.monotonic() > deadline and not gave_up:
            gave_up = True
            for pid in _descendants(child.pid):
                _kill(pid)
            child.kill()
        time.sleep(0.05)
    out, err = child.communicate()
    if gave_up:
        return Measured(None, peak, failure=f"did not finish in {timeout_s:.0f} s")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        return Measured(None, peak, failure=_error_line(err, child.returncode))
    report = json.loads(lines[-1])
    return Measured(report.get("seconds"), max(peak, report.get("peak_bytes", 0)), report)


def _error_line(stderr: str, status: int) -> str:
    """The line of a child's stderr that says what went wrong: its exception, else its last line."""
    lines = stderr.strip().splitlines()
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)]
    return (raised or lines or [f"exit status {status}"])[-1][:200]


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of process `root` and all its descendants, now.

    Walks the tree through each thread's `children` file rather than scanning all of /proc, so
    that watching costs the measured process next to nothing.
    """
    total = 0
    for pid in [root, *_descendants(root)]:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue  # the process ended while we looked
    return total


def _descendants(root: int) -> list[int]:
    found: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop()
        try:
            for task in os.scandir(f"/proc/{pid}/task"):
                children = [int(child) for child in Path(task.path, "children").read_text().split()]
                found += children
                pending += children
        except (OSError, ValueError):
            continue
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
