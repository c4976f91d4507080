"""Settings that change what the analysis finds, kept with the warehouse they shaped.

A warehouse may hold a `wirespeed.toml`:

    [communication]
    # Regular expressions (Python/RE2 syntax, matched anywhere in the name) for kernels or CPU
    # events that are communication but carry no collective metadata and that no built-in
    # family (pipelines/read/comm_kernels.py: DeepEP, pplx, NVSHMEM, custom all-reduces, ...) knows.
    patterns = ["^my_allreduce_kernel", "my_dispatch_kernel"]

The patterns add to the built-in ones; they never replace them. Also:

    [whatif]
    # The device's time to add x bytes, as CSV rows `bytes,seconds` (relative to this file).
    reduce_cost = "a100_vector_add.csv"

    [verdict]
    exposed_share_min = 0.05     # below this, the run is not communication-bound
    wait_share_min = 0.5         # from this share of exposed time spent waiting: straggler-bound
    full_rate_sf_min = 0.9       # a what-if SF at full line rate below this: bandwidth-bound
    utilization_max = 0.5        # achieved utilisation below this (and the above not met): transport-bound
    compute_inflation_max = 0.15 # compute per step growing more than this with N: compute explains loss

    [regressions]                # a run against its job's baseline (sql/regressions.sql, docs/compare.md)
    baseline_runs = 5            # the last this many earlier runs of the job, unless one is tagged baseline
    regression_p_max = 0.01      # one-sided Mann-Whitney p at most this ...
    step_change_min = 0.10       # ... and step time at least this much longer (relative),
    share_change_min = 0.10      # exposed or waiting share this much larger (absolute),
    busbw_change_min = 0.25      # bus bandwidth of a collective kind this much lower (relative)
    severity = "warn"            # of the Dagster check that fails on a regression: "warn" or "error"
    alert_command = ["notify", "--channel", "training"]  # run with each regression as JSON on stdin

    [resources]
    threads = 8                  # DuckDB threads for parsing and analysis (default: every core)
    memory_mb = 600              # DuckDB's memory per ingest; beyond it, joins and tables spill to disk
    shard_mb = 1024              # raw trace bytes per parse step of a Dagster run (its workers share them)

    [dimensions]
    # The parallel dimension of a process group, by its description or name, where the built-in
    # rules (sql/step_comm_groups.sql) guess wrong.
    "default_pg" = "tp"
    "7" = "pp"

    [steps]
    # Each instance of this annotation on a rank is a step, numbered 0, 1, 2, ... in time order,
    # where the traces have no ProfilerStep#<n> (benchmarks, inference); an event is an instance
    # when its name holds this text, as in HTA. `wirespeed ingest --step-annotation` wins over it.
    annotation = "## forward ##"
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.analysis import whatif
from pipelines.read import comm_kernels

CONFIG_FILE = "wirespeed.toml"
# Where DuckDB spills joins, sorts and tables that outgrow its memory limit.
SPILL_DIR = str(Path(tempfile.gettempdir()) / "wirespeed-duckdb-spill")

# Communication by name, for events without collective metadata: every kernel family's rules
# (pipelines/read/comm_kernels.py says which libraries, with their sources) and the CPU side's
# annotations and operators.
BUILTIN_COMM_PATTERNS: tuple[str, ...] = tuple(rule.pattern for rule in comm_kernels.RULES) + comm_kernels.CPU_PATTERNS


# The parallel dimensions a process group can serve (see sql/step_comm_groups.sql).
DIMENSIONS = ("dp", "fsdp", "tp", "pp", "ep", "cp", "other")

# Thresholds of the verdict's bottleneck classes (docs/whatif.md explains each).
DEFAULT_VERDICT = {
    "exposed_share_min": 0.05,
    "wait_share_min": 0.5,
    "full_rate_sf_min": 0.9,
    "utilization_max": 0.5,
    "compute_inflation_max": 0.15,
}


# When a run regressed against its job's baseline (sql/regressions.sql).
DEFAULT_REGRESSIONS = {
    "baseline_runs": 5,
    "regression_p_max": 0.01,
    "step_change_min": 0.10,
    "share_change_min": 0.10,
    "busbw_change_min": 0.25,
}
SEVERITIES = ("warn", "error")


@dataclass(frozen=True)
class Settings:
    comm_patterns: tuple[str, ...] = BUILTIN_COMM_PATTERNS
    threads: int = max(1, os.cpu_count() or 1)
    # What DuckDB may hold in memory during an ingest; the rest spills to the temporary folder. With
    # the interpreter, libraries and the analysis's Python steps (which DuckDB makes room for:
    # pipelines/analysis/tables.py), an ingest stays under 1 GB (docs/performance.md): the analysis
    # of ten million device events peaked at 0.98 GB, and at 1.01-1.02 GB with 640 MB.
    memory_mb: int = 600
    shard_mb: int = 1024
    reduce_cost: tuple[tuple[int, float], ...] = whatif.DEFAULT_REDUCE_COST
    verdict: dict = field(default_factory=lambda: dict(DEFAULT_VERDICT))
    # (process group description or name, dimension) pairs from [dimensions].
    dimensions: tuple[tuple[str, str], ...] = ()
    regressions: dict = field(default_factory=lambda: dict(DEFAULT_REGRESSIONS))
    regression_severity: str = "warn"
    # Run by the regression_alert_sensor for each run that regressed, the finding on its stdin.
    regression_alert_command: tuple[str, ...] = ()
    # The annotation whose instances are the steps ([steps] annotation); None: ProfilerStep#<n>.
    step_annotation: str | None = None

    def duckdb_config(self) -> dict:
        """The DuckDB configuration of an ingest's sessions: its threads and memory, where to spill."""
        return {
            "threads": self.threads,
            "memory_limit": f"{self.memory_mb}MB",
            "preserve_insertion_order": False,
            "temp_directory": SPILL_DIR,
            # DuckDB turns an ASOF join whose left side it guesses to be tiny into a nested loop;
            # after a few joins its guesses can be wrong by millions of rows, and the loop takes minutes.
            "asof_loop_join_threshold": 0,
        }

    def comm_regex(self) -> str:
        """All communication patterns as one regular expression, each kept apart in its group."""
        return "|".join(f"(?:{p})" for p in self.comm_patterns)


def load(warehouse_root: Path) -> Settings:
    """The settings of a warehouse: built-ins plus its `wirespeed.toml`, if any."""
    path = Path(warehouse_root) / CONFIG_FILE
    if not path.exists():
        return Settings()
    try:
        config = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as bad:
        raise ValueError(f"{path}: {bad}") from bad
    extra = config.get("communication", {}).get("patterns", [])
    if not isinstance(extra, list) or not all(isinstance(p, str) for p in extra):
        raise ValueError(f"{path}: [communication] patterns must be a list of strings")
    for pattern in extra:
        try:
            re.compile(pattern)
        except re.error as bad:
            raise ValueError(f"{path}: pattern {pattern!r} is not a regular expression: {bad}") from bad
    cost_file = config.get("whatif", {}).get("reduce_cost")
    reduce_cost = tuple(whatif.read_reduce_cost(path.parent / cost_file)) if cost_file else whatif.DEFAULT_REDUCE_COST
    verdict = dict(DEFAULT_VERDICT)
    for key, value in config.get("verdict", {}).items():
        if key not in DEFAULT_VERDICT or not isinstance(value, (int, float)):
            raise ValueError(f"{path}: [verdict] {key} is not one of {sorted(DEFAULT_VERDICT)} with a number")
        verdict[key] = float(value)
    regressions = dict(DEFAULT_REGRESSIONS)
    severity, alert = "warn", ()
    for key, value in config.get("regressions", {}).items():
        if key == "alert_command":
            if not isinstance(value, list) or not value or not all(isinstance(part, str) for part in value):
                raise ValueError(f"{path}: [regressions] alert_command must be a command as a list of strings")
            alert = tuple(value)
        elif key == "severity":
            if value not in SEVERITIES:
                raise ValueError(f"{path}: [regressions] severity must be one of {', '.join(SEVERITIES)}")
            severity = value
        elif key in DEFAULT_REGRESSIONS and isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            regressions[key] = type(DEFAULT_REGRESSIONS[key])(value)
        else:
            raise ValueError(
                f"{path}: [regressions] {key} is not severity, alert_command or one of {sorted(DEFAULT_REGRESSIONS)} with a number"
            )
    resources = config.get("resources", {})
    for key, value in resources.items():
        if key not in ("threads", "memory_mb", "shard_mb") or not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{path}: [resources] {key} must be threads, memory_mb or shard_mb, with a positive whole number")
    dimensions = config.get("dimensions", {})
    for key, value in dimensions.items():
        if value not in DIMENSIONS:
            raise ValueError(f"{path}: [dimensions] {key!r} = {value!r} is not one of {', '.join(DIMENSIONS)}")
    steps = config.get("steps", {})
    for key, value in steps.items():
        if key != "annotation":
            raise ValueError(f"{path}: [steps] {key} is not a setting; the one there is annotation")
        if not isinstance(value, str) or not value:
            raise ValueError(f"{path}: [steps] annotation must be an annotation's name, as a non-empty string")
    return Settings(
        BUILTIN_COMM_PATTERNS + tuple(extra),
        threads=resources.get("threads", Settings.threads),
        memory_mb=resources.get("memory_mb", Settings.memory_mb),
        shard_mb=resources.get("shard_mb", Settings.shard_mb),
        reduce_cost=reduce_cost,
        verdict=verdict,
        dimensions=tuple(dimensions.items()),
        regressions=regressions,
        regression_severity=severity,
        regression_alert_command=alert,
        step_annotation=steps.get("annotation"),
    )
