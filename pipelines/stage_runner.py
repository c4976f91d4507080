"""The stages of many runs in this process, without Dagster: what `wirespeed ingest` runs, and what
a Dagster batch of small runs runs inside its one step (pipelines/defs/ingest/batches.py).

Small runs go through a pool of worker processes, large ones run here; the roll-ups are updated
once for all of them, then each report is written from them.
"""

from __future__ import annotations

import multiprocessing
import uuid
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipelines import settings, stages
from pipelines.folders import landing_dir
from pipelines.warehouse import rollups
from pipelines.warehouse.store import Warehouse


@dataclass
class StagesRun:
    """How one run's stages went: the first error, if any, and the checks that failed."""

    error: str | None
    failed_checks: list[str]
    verdicts: list = field(default_factory=list)  # the checks' verdicts, where the stages ran here
    warnings: list[str] = field(default_factory=list)
    outcomes: list[stages.StageOutcome] = field(default_factory=list)  # the parse's and the analysis', where they ran here


def failed(problem: Exception) -> StagesRun:
    """A run whose stage raised fails, as a failed Dagster step would; the other runs go on."""
    return StagesRun(str(problem) if isinstance(problem, stages.StageError) else f"{type(problem).__name__}: {problem}", [])


class Directly:
    """The stages as plain functions: parse and analyse each run, update the roll-ups for all of
    them at once, then write each report from those roll-ups.

    Small runs go through a pool of processes, one per core, each with its share of DuckDB's
    threads and memory: a small run keeps one core busy, and its fixed costs (sessions, queries
    of a few milliseconds, the report's charts) dominate it. A large run uses every core itself.
    """

    def __init__(self, store: Warehouse, sizes: dict[str, int], landing: Path | None = None):
        self.store = store
        self.sizes = sizes
        self.landing = landing or landing_dir()  # where runs without a registered source are
        self.settings = settings.load(store.root)
        small = [name for name, size in sizes.items() if size <= SMALL_RUN_BYTES]
        workers = min(self.settings.threads, len(small))
        self.pool = None
        if workers > 1:
            share = replace(
                self.settings, threads=max(1, self.settings.threads // workers), memory_mb=max(64, self.settings.memory_mb // workers)
            )
            context = multiprocessing.get_context("spawn")  # a fork would copy DuckDB's threads' locks mid-use
            self.pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                                            initargs=(str(store.root), share, self.landing))
            self.small = set(small)
        else:
            self.small = set()
        self.pending: dict[str, Future] = {}

    def run(self, name: str, progress) -> StagesRun | None:
        """Ingest `name` now, or hand it to the pool (None: its outcome comes with `finish`);
        `progress.advance(nbytes)` hears of the raw bytes read."""
        if name in self.small:
            self.pending[name] = _submit(self.pool, _parse_and_analyze, name)
            self.pending[name].add_done_callback(lambda _, size=self.sizes[name]: progress.advance(size))
            return None
        return _parse_and_analyze(name, self.store, self.settings, self.landing, progress.advance)

    def finish(self, outcomes: dict[str, StagesRun | None]) -> None:
        """Update the roll-ups for the runs ingested and write their reports: the pool's once the
        update is done, while those written in this process run (a report written here while the
        update runs starts its queries at once, those that read roll-ups after the update)."""
        try:
            for name, future in self.pending.items():
                outcomes[name] = _outcome_of(future)
            ingested = [name for name, outcome in outcomes.items() if outcome.error is None]
            if not ingested:
                return
            with ThreadPoolExecutor(1, thread_name_prefix="wirespeed-rollups") as updating:
                updated = updating.submit(rollups.update, self.store, self.settings, ingested)
                pooled = [name for name in ingested if name in self.small]
                if pooled:
                    updated.result()
                reports = {name: _submit(self.pool, _report, name, outcomes[name].verdicts) for name in pooled}
                reports.update({
                    name: _done(_report, name, outcomes[name].verdicts, self.store, self.settings, updated)
                    for name in ingested if name not in self.small
                })
                updated.result()  # a failed update fails the ingest, as it did before any report
            for name, future in reports.items():
                failure = _outcome_of(future)  # a report returns nothing
                if failure is not None:
                    outcomes[name] = failure
        finally:
            if self.pool is not None:
                self.pool.shutdown()


# Runs up to this size (raw inputs) share the cores with other runs; larger ones have them all.
SMALL_RUN_BYTES = 64 << 20
# A pool worker's warehouse, settings and landing folder, set once when it starts.
_worker: dict = {}


def _start_worker(root: str, share: settings.Settings, landing: Path) -> None:
    _worker["store"] = Warehouse(root)
    _worker["settings"] = share
    _worker["landing"] = landing


def _parse_and_analyze(
    name: str, store: Warehouse | None = None, config: settings.Settings | None = None, landing: Path | None = None, advance=None
) -> StagesRun:
    """The parse and analysis stages of one run, in this process or in a pool worker."""
    store, config, landing = store or _worker["store"], config or _worker["settings"], landing or _worker["landing"]
    key = f"cli-{uuid.uuid4().hex}"
    try:
        parsed = stages.parse(store, config, landing, name, key, advance, publish=False)
        analyzed = stages.analyze(store, config, name, key)
    except Exception as problem:  # any stage's failure fails this run only
        return failed(problem)
    verdicts = parsed.verdicts + analyzed.verdicts
    failing = [v.name for v in verdicts if not v.outcome.passed]
    return StagesRun(None, failing, verdicts, parsed.warnings + analyzed.warnings, [parsed, analyzed])


def _report(
    name: str, verdicts: list, store: Warehouse | None = None, config: settings.Settings | None = None,
    updated: Future | None = None,
) -> None:
    """The report stage of one run, from the roll-ups just updated for it (or being updated: `updated`)."""
    stages.report(store or _worker["store"], config or _worker["settings"], name, verdicts, stored_rollups=updated or True)


def _submit(pool: ProcessPoolExecutor, function, *arguments) -> Future:
    """`pool.submit(...)`, or a failed future when the pool is broken (a worker died)."""
    try:
        return pool.submit(function, *arguments)
    except Exception as problem:  # read back by _outcome_of, as the run's failure
        future: Future = Future()
        future.set_exception(problem)
        return future


def _done(function, *arguments) -> Future:
    """`function(*arguments)` run now, as a finished future, so pooled and unpooled runs read alike."""
    future: Future = Future()
    try:
        future.set_result(function(*arguments))
    except Exception as problem:  # read back by _outcome_of
        future.set_exception(problem)
    return future


def _outcome_of(future: Future):
    """What the future's work returned, or the run's failure when it raised or its worker died."""
    try:
        return future.result()
    except Exception as problem:  # BrokenProcessPool among them
        return failed(problem)


