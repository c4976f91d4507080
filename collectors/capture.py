"""Profile a training loop for wirespeed: torch.profiler with a step schedule, one trace per rank.

    from collectors import Capture

    with Capture(wait=1, warmup=1, active=4) as capture:
        for batch in loader:
            train_step(batch)
            capture.step()

Run under `wirespeed collect`, the run folder comes from the environment and the launcher samples
the host's counters; otherwise pass `run_dir`, and local rank 0 of each host samples them. Each rank
also dumps PyTorch's Flight Recorder (every collective of every step) into `fr/` when the job ends
or is signalled (collectors/flight_recorder.py). Profiling must never break training: if the
profiler, the sampler or a dump fails, the failure is written to the rank's file (and so to the
manifest) and training goes on.
"""

from __future__ import annotations

import os
import time
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

from collectors import flight_recorder, host, manifest, rundir
from collectors.sampler import Sampler


class Capture:
    def __init__(
        self,
        run_dir: str | Path | None = None,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 4,
        repeat: int = 1,
        record_shapes: bool = True,
        with_stack: bool = False,
        compress: bool = False,
        link_gbps: float | None = None,
        sample_interval_s: float = 0.1,
        tags: dict[str, str] | None = None,
        run_id: str | None = None,
        flight_recorder_dumps: bool = True,
    ):
        """`record_shapes` is on because gloo collectives carry their sizes only in input shapes.

        `flight_recorder_dumps` turns the Flight Recorder on (when `wirespeed collect` has not;
        NCCL reads the variable when a process group is made, so create Capture before it) and
        writes its dumps."""
        run_dir = run_dir or os.environ.get(rundir.ENV_RUN_DIR)
        if not run_dir:
            raise ValueError(f"no run folder: pass run_dir=, or start the job under `wirespeed collect` (sets {rundir.ENV_RUN_DIR})")
        self.run_dir = Path(run_dir)
        self.run_id = run_id or os.environ.get(rundir.ENV_RUN_ID) or self.run_dir.name
        self.schedule = dict(wait=wait, warmup=warmup, active=active, repeat=repeat)
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.suffix = ".pt.trace.json.gz" if compress else ".pt.trace.json"
        self.link_gbps = link_gbps
        self.sample_interval_s = sample_interval_s
        self.sampler: Sampler | None = None
        self.sampling: dict | None = None
        self.tags = dict(tags or {})
        self.failures: list[dict] = []
        self.traces: list[str] = []
        self.profiler: torch.profiler.profile | None = None
        self.rank = 0
        self.world_size = 1
        self.cycles = 0
        self.recorder: flight_recorder.Recorder | None = None
        self.flight_recorder_dumps = flight_recorder_dumps
        if flight_recorder_dumps:
            os.environ.setdefault(flight_recorder.ENV_BUFFER, str(flight_recorder.BUFFER_ENTRIES))

    # --- the profiler, guarded ---------------------------------------------------------------

    def __enter__(self) -> Capture:
        self.rank, self.world_size = _rank_and_world()
        if self.flight_recorder_dumps:
            try:
                # One recorder a process: `wirespeed collect` may have armed it at init_process_group.
                self.recorder = flight_recorder.current() or flight_recorder.Recorder(self.run_dir, self.rank, self.world_size)
                self.recorder.start()  # nothing to do when armed already
            except Exception as failure:  # the dumps are optional; training is not
                self.recorder = None
                self._fail("flight recorder", failure)
        try:
            (self.run_dir / rundir.TRACES).mkdir(parents=True, exist_ok=True)
        except OSError as failure:  # nowhere to write traces: train without profiling
            self._fail("start", failure)
            return self
        launched = os.environ.get(rundir.ENV_LAUNCHER) == "1"
        if not launched and int(os.environ.get("LOCAL_RANK", self.rank)) == 0 and self.sample_interval_s > 0:
            try:
                self.sampler = Sampler(self.run_dir, self.sample_interval_s)
                self.sampler.start()
            except Exception as failure:
                self._fail("sampler", failure)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        try:
            self.profiler = torch.profiler.profile(
                activities=activities,
                schedule=torch.profiler.schedule(**self.schedule),
                on_trace_ready=self._export,
                record_shapes=self.record_shapes,
                with_stack=self.with_stack,
            )
            self.profiler.__enter__()
        except Exception as failure:  # profiling is optional; training is not
            self._fail("start", failure)
        return self

    def step(self) -> None:
        """Call once per training step, after the step's work was issued."""
        if self.profiler is None:
            return
        try:
            self.profiler.step()
        except Exception as failure:
            self._fail("step", failure)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.recorder is not None:
            self._stop_recorder(exc)
        if self.profiler is not None:
            try:
                self.profiler.__exit__(None, None, None)
            except Exception as failure:
                self._fail("stop", failure)
        if self.sampler is not None:
            self.sampling = self.sampler.stop()
        try:
            self._describe_rank()
            if os.environ.get(rundir.ENV_LAUNCHER) != "1":
                self._finish_without_launcher()
        except Exception as failure:  # a run folder we cannot write must not fail the job
            warnings.warn(f"wirespeed: could not describe rank {self.rank} in {self.run_dir}: {failure}", stacklevel=2)

    def _stop_recorder(self, exc: BaseException | None) -> None:
        """The last dump: at the end, or on the exception that ends the job (a collective's timeout)."""
        reason = "end" if exc is None else f"exception: {''.join(traceback.format_exception_only(exc)).strip()[:500]}"
        try:
            self.recorder.stop(reason, exc)
        except Exception as failure:
            self._fail("flight recorder", failure)
        for failure in self.recorder.failures:
            self.failures.append({"stage": "flight recorder", "error": failure, "at_ns": time.time_ns()})

    def _export(self, profiler: torch.profiler.profile) -> None:
        name = f"rank{self.rank}{self.suffix}" if self.cycles == 0 else f"rank{self.rank}.cycle{self.cycles}{self.suffix}"
        self.cycles += 1
        target = rundir.inside(self.run_dir / rundir.TRACES, name)
        partial = target.with_name(f".{target.name}.partial{self.suffix}")
        try:
            profiler.export_chrome_trace(str(partial))
            # Kineto logs a failed write and returns: check that a trace is really there.
            if not partial.is_file() or partial.stat().st_size == 0:
                raise OSError(f"the profiler wrote no trace to {partial}")
            os.replace(partial, target)
            self.traces.append(f"{rundir.TRACES}/{name}")
        except Exception as failure:
            self._fail("export", failure)

    def _fail(self, stage: str, failure: Exception) -> None:
        self.profiler = None if stage in ("start", "step") else self.profiler
        detail = "".join(traceback.format_exception_only(type(failure), failure)).strip()
        self.failures.append({"stage": stage, "error": detail, "at_ns": time.time_ns()})
        what = stage if stage == "flight recorder" else f"profiler {stage}"
        warnings.warn(f"wirespeed: {what} failed on rank {self.rank}, training continues: {detail}", stacklevel=3)

    # --- what the rank knows about itself ----------------------------------------------------

    def _describe_rank(self) -> None:
        backend = dist.get_backend() if dist.is_available() and dist.is_initialized() else None
        link, source, interface = host.link_rate(self.link_gbps, backend)
        intra_link, intra_source = host.intra_link_rate()
        cuda = torch.cuda.is_available()
        description = {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": int(os.environ.get("LOCAL_RANK", self.rank)),
            "host": host.hostname(),
            "pid": os.getpid(),
            "backend": backend,
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            "device_model": torch.cuda.get_device_name() if cuda else host.cpu_model(),
            "link_gbps": link,
            "link_source": source,
            "link_interface": interface,
            "intra_link_gbps": intra_link,
            "intra_link_source": intra_source,
            "sampling": self.sampling,
            "tags": self.tags,
            "traces": self.traces,
            "failures": self.failures,
        }
        rundir.write_json_atomically(self.run_dir / rundir.RANKS / f"rank{self.rank}.json", description)

    def _finish_without_launcher(self) -> None:
        """Without `wirespeed collect`, rank 0 writes the manifest once every rank has written its file."""
        if dist.is_available() and dist.is_initialized() and self.world_size > 1:
            try:
                dist.barrier()
            except Exception as failure:
                self._fail("barrier", failure)
        if self.rank == 0:
            manifest.finish(self.run_dir, self.run_id, self.tags)


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
