"""`wirespeed collect`: run a training command so that it leaves a complete run folder behind.

It creates the run folder, sets up NCCL's debug logging into it (one file per process, with
timestamps where NCCL supports them), turns PyTorch's Flight Recorder on (and NCCL's dump of it on
a timeout) and arms it in every Python process of the job that makes a process group (a
`sitecustomize` put first on the job's PYTHONPATH, collectors/inject/), tells the training
processes where the folder is, samples the
host's network and CPU counters while the command runs, and once the command has exited (every rank
has finished) takes the traces the job wrote to folders of its own (`--traces DIR`,
collectors/job_traces.py) and writes the manifest and the `_DONE` marker, whatever the command's
exit status: a failed run is still worth analysing.

On a cluster, every host runs its own `wirespeed collect --nnodes N --run-id SAME` into one shared
landing folder, around its own launcher. Each host records its launch in `hosts/<host>.json`; the
host that finishes last (the one that sees N host files and wins the exclusive claim on
`hosts/.finishing`) writes the manifest and `_DONE`, so the run is never marked complete while a
host is still running.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from collectors import flight_recorder, host, job_traces, manifest, rundir
from collectors.sampler import Sampler, safe_host

# NCCL's INIT lines give communicators, ranks, devices and transports; COLL lines give every
# collective call. Timestamps exist from NCCL 2.26 (older versions ignore these variables).
NCCL_ENV = {
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,COLL,ENV",
    "NCCL_DEBUG_TIMESTAMP_LEVELS": "ALL",
    "NCCL_DEBUG_TIMESTAMP_FORMAT": "[%F %T.%6f] ",
}


# The folder whose sitecustomize arms the Flight Recorder in every process of the job that makes a
# process group (collectors/inject/sitecustomize.py); WIRESPEED_INJECT=0 leaves the job's path alone.
INJECT_DIR = Path(__file__).resolve().parent / "inject"
ENV_INJECT = "WIRESPEED_INJECT"


def new_run_id() -> str:
    return f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"


def collect(
    landing: Path,
    command: list[str],
    run_id: str | None = None,
    link_gbps: float | None = None,
    tags: dict[str, str] | None = None,
    intra_link_gbps: float | None = None,
    sample_interval_ms: float = 100,
    nnodes: int = 1,
    quiet: bool = False,
    traces: list[str] | None = None,
) -> tuple[Path, int]:
    """Run `command` with the run folder set up; return the folder and the command's exit code.

    With `nnodes` > 1 this is one of the run's hosts: the folder may exist already (another host
    made it) and the run id must be given, the same on every host. `quiet` sends the command's
    output to `output/<host>.log` in the run folder instead of this terminal (it is read as a log:
    PyTorch's watchdog writes there). `traces` are the folders (globs allowed) where the job
    writes traces of its own.
    """
    if not command:
        raise ValueError("no command to run")
    if nnodes < 1:
        raise ValueError("--nnodes must be at least 1")
    if nnodes > 1 and not run_id:
        raise ValueError("with --nnodes, give every host the same --run-id")
    run_id = run_id or new_run_id()
    run_dir = rundir.inside(Path(landing), run_id) if "/" not in run_id else None
    if run_dir is None or run_dir.name != run_id:
        raise ValueError(f"run id {run_id!r} must be a plain folder name")
    host_file = run_dir / rundir.HOSTS / f"{safe_host(host.hostname())}.json"
    if nnodes == 1 and run_dir.exists():
        raise FileExistsError(f"{run_dir} already exists: choose another --run-id")
    if (run_dir / rundir.DONE).exists():
        raise FileExistsError(f"{run_dir} has finished already: choose another --run-id")
    if host_file.exists():
        raise FileExistsError(f"{run_dir} already has a launch from this host ({host_file.name}): choose another --run-id")
    for folder in (rundir.TRACES, rundir.RANKS, rundir.NCCL, rundir.HOSTS, rundir.FR):
        (run_dir / folder).mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ)
    for name, value in (NCCL_ENV | flight_recorder.launch_environment(run_dir)).items():
        environment.setdefault(name, value)
    environment["NCCL_DEBUG_FILE"] = str(run_dir / rundir.NCCL / "nccl.%h.%p.log")
    environment[rundir.ENV_RUN_DIR] = str(run_dir.absolute())
    environment[rundir.ENV_RUN_ID] = run_id
    environment[rundir.ENV_LAUNCHER] = "1"
    if os.environ.get(ENV_INJECT) != "0":
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, (str(INJECT_DIR), environment.get("PYTHONPATH"))))
    if link_gbps is not None:
        environment[rundir.ENV_LINK_GBPS] = str(link_gbps)
    if intra_link_gbps is not None:
        environment[rundir.ENV_INTRA_LINK_GBPS] = str(intra_link_gbps)
    sampler = Sampler(run_dir, sample_interval_ms / 1000) if sample_interval_ms > 0 else None
    if sampler:
        sampler.start()
    traces = traces or []
    before = job_traces.snapshot(traces)
    started = time.time_ns()
    output = run_dir / rundir.OUTPUT / f"{safe_host(host.hostname())}.log" if quiet else None
    try:
        exit_code = _run(command, environment, output)
    finally:
        sampling = [sampler.stop() | {"host": host.hostname()}] if sampler else []
    taken = job_traces.take(traces, before, run_dir, safe_host(host.hostname()))
    launch = {
        "command": command,
        # NCCL writes local wall-clock timestamps; this says which zone they are in.
        "utc_offset_s": int(dt.datetime.now().astimezone().utcoffset().total_seconds()),
        "launcher_host": host.hostname(),
        "started_ns": started,
        "ended_ns": time.time_ns(),
        "exit_code": exit_code,
        "sampling": sampling,
        "job_traces": taken,
    }
    rundir.write_json_atomically(host_file, launch)
    if _last_to_finish(run_dir, nnodes):
        manifest.finish(run_dir, run_id, tags, manifest.merge_launches(rundir.read_host_files(run_dir)) | {"nnodes": nnodes})
    return run_dir, exit_code


def _last_to_finish(run_dir: Path, nnodes: int) -> bool:
    """Whether this host finishes the run: every host has written its file and this one claimed it.

    Each host writes its file before counting, so the last one to write always counts `nnodes`;
    when two count `nnodes` at once, the exclusive create lets exactly one of them through.
    """
    if len(list((run_dir / rundir.HOSTS).glob("*.json"))) < nnodes:
        return False
    try:
        os.close(os.open(run_dir / rundir.FINISH_CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _run(command: list[str], environment: dict[str, str], output: Path | None) -> int:
    """Run the command in the foreground, passing SIGINT/SIGTERM on so it can stop cleanly; its
    output goes to this terminal, or to the file `output`.

    The handlers that pass them on are in place before the command starts, so that it starts with
    both at their defaults (exec resets a handled signal, but keeps an ignored one): started from a
    shell or a test harness that ignores SIGTERM, the job would otherwise ignore the scheduler's
    SIGTERM this process passes on, and hang on past it.

    SIGUSR1 asks the ranks for a Flight Recorder dump (collectors/flight_recorder.py). It is
    ignored here and in every process of the job that does not handle it, as the launchers
    (torchrun, a multiprocessing parent) do not: sent to the whole job, as a scheduler sends it,
    it dumps the ranks and ends nothing."""
    started: list[subprocess.Popen] = []

    def forward(signum, _frame):
        if not started:  # before the command started: it never will
            raise SystemExit(128 + signum)
        started[0].send_signal(signum)

    usr1 = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    forwarded = {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        if output is None:
            started.append(subprocess.Popen(command, env=environment))
        else:
            output.parent.mkdir(parents=True, exist_ok=True)
            with open(output, "ab") as handle:
                started.append(subprocess.Popen(command, env=environment, stdout=handle, stderr=subprocess.STDOUT))
        return started[0].wait()
    finally:
        for signum, previous in forwarded.items():
            signal.signal(signum, previous)
        signal.signal(signal.SIGUSR1, usr1)
