"""PyTorch's Flight Recorder on every rank, dumped as JSON into the run folder whenever it matters.

The recorder keeps the last `TORCH_FR_BUFFER_SIZE` collectives of every process group (what,
how big, in which order, in which state) at a cost too small to measure (docs/flight-recorder.md).
`wirespeed collect` turns it on for the job, and arms a `Recorder` in every process of it that
makes a process group (`arm`, called by collectors/inject/sitecustomize.py; or `Capture` runs
one: a process has at most one, `current()`). The recorder writes
`fr/rank<R>.json` (and `fr/rank<R>.nccl.json`, ProcessGroupNCCL's own recorder, on builds with
NCCL) with the collector's `wirespeed` section (collectors/fr_format.py):

- when the job ends, normally or by an exception (a gloo collective's timeout raises one; armed
  without `Capture`, an exception that reaches the interpreter, or the process's exit);
- on SIGTERM, after which the process ends as SIGTERM would have ended it, so that a scheduler
  killing a hung job still leaves the dumps; on SIGUSR1 and SIGINT, after which the job goes on
  as before (SIGUSR1 is the usual "dump now" request, SIGINT becomes KeyboardInterrupt as ever);
- when NCCL's watchdog times a collective out: with TORCH_NCCL_DUMP_ON_TIMEOUT it writes its own
  dump (a pickle, which ingest reads as plain values) to TORCH_FR_DUMP_TEMP_FILE<rank> before it ends
  the process; the watcher sees that file appear and writes the JSON beside it.

Python runs signal handlers in the main thread only, between bytecodes: a rank waiting inside a
collective (in C++) would run none until the wait ends, and a scheduler's SIGKILL comes first.
So the watcher thread listens on the signal wakeup fd, which the interpreter writes at the moment
a signal arrives, and dumps at once; the main thread's handler then only chains to whatever
handled the signal before. When SIGTERM's handler cannot run because the main thread is stuck,
the watcher ends the process itself, as SIGTERM would have.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path

from collectors import fr_format as fr
from collectors import host

ENV_BUFFER = "TORCH_FR_BUFFER_SIZE"
# Entries per process group's recorder: torch's usual size for NCCL, and at no cost we can
# measure on a gloo job (docs/flight-recorder.md); a few steps of a large model's collectives.
BUFFER_ENTRIES = 2000
# NCCL's dump-on-timeout writes <prefix><global rank>; the watcher polls for it this often.
ENV_TORCH_DUMP = "TORCH_FR_DUMP_TEMP_FILE"
TORCH_DUMP_PREFIX = "nccl_trace_rank_"
POLL_S = 1.0
# How long the watcher gives the main thread to act on SIGTERM before ending the process itself.
MAIN_THREAD_GRACE_S = 2.0
# How long the main thread's handler waits for the watcher's dump.
DUMP_WAIT_S = 30.0
# Dumps that go on (the job lives) and the one that ends the process.
CONTINUING = (signal.SIGUSR1, signal.SIGINT)
ENDING = signal.SIGTERM
MAX_FRAMES = 64
MAX_THREADS = 32


def launch_environment(run_dir: Path) -> dict[str, str]:
    """The variables `wirespeed collect` sets for the job, where the user has not set them."""
    return {
        ENV_BUFFER: str(BUFFER_ENTRIES),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        ENV_TORCH_DUMP: str(run_dir.absolute() / fr.FOLDER / TORCH_DUMP_PREFIX),
    }


def current() -> Recorder | None:
    """This process's armed recorder, if any: `Capture` uses it rather than arming a second."""
    return _current


def arm(run_dir: Path) -> Recorder | None:
    """Arm a recorder in a process that has just made its default process group without one (the
    job runs without `Capture`): it dumps on SIGTERM, SIGUSR1 and SIGINT, on an exception that
    reaches the interpreter, and when the process exits. None when one is armed already."""
    if _current is not None:
        return None
    import torch.distributed as dist

    recorder = Recorder(run_dir, dist.get_rank(), dist.get_world_size())
    recorder.start()
    previous_hook = sys.excepthook

    def on_exception(kind, value, trace):
        if not recorder.stopped:
            recorder.stop(_exception_reason(value), value)
        previous_hook(kind, value, trace)

    sys.excepthook = on_exception
    atexit.register(lambda: recorder.stopped or recorder.stop("exit"))
    return recorder


def _exception_reason(failure: BaseException) -> str:
    return f"exception: {''.join(traceback.format_exception_only(failure)).strip()[:500]}"


class Recorder:
    """Writes this process's Flight Recorder dumps into `<run_dir>/fr/`; never raises into the job."""

    def __init__(self, run_dir: Path, rank: int, world_size: int):
        self.folder = Path(run_dir) / fr.FOLDER
        self.rank = rank
        self.world_size = world_size
        self.failures: list[str] = []
        self._earlier: list[dict] = []
        self._lock = threading.RLock()  # a handler may interrupt a dump of its own thread
        self._previous: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._ending_dumped = threading.Event()  # the watcher has dumped for SIGTERM
        self._ending_handled = threading.Event()  # the main thread's handler has run for SIGTERM
        self._groups: list[dict] = []  # the last groups seen: they outlive destroy_process_group
        self._started = False
        self.stopped = False

    # --- arming and disarming ------------------------------------------------------------------

    def start(self) -> None:
        """Install the signal handlers and start the watcher (from the main thread only: signals
        belong to it; elsewhere the job is dumped when it ends and nothing else). Once only."""
        global _current
        if self._started:
            return
        self._started = True
        if _current is None:
            _current = self
        if threading.current_thread() is not threading.main_thread():
            return
        read, write = os.pipe()
        os.set_blocking(write, False)
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        if previous != -1:
            # Someone else's (an event loop's): give it back and let the handlers dump themselves.
            signal.set_wakeup_fd(previous)
            os.close(read)
            os.close(write)
        else:
            self._pipe = (read, write)
        for signum in (ENDING, *CONTINUING):
            if signum == signal.SIGINT and signal.getsignal(signum) is not signal.default_int_handler:
                continue  # the job handles SIGINT its own way; the wakeup fd still tells the watcher
            self._previous[signum] = signal.signal(signum, self._on_signal)
        self._watcher = threading.Thread(target=self._watch, name="wirespeed-fr", daemon=True)
        self._watcher.start()
        os.register_at_fork(after_in_child=self._leave_to_parent)

    def _leave_to_parent(self) -> None:
        """In a forked child (a data loader's worker): the recorder is the parent's. The child's
        signals must neither dump the parent's rank nor reach its watcher through the inherited
        wakeup fd (which would take a worker's SIGTERM for the rank's, and end the rank)."""
        global _current
        if self._pipe is None or self.stopped:
            return
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(-1)
            for signum, previous in self._previous.items():
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
        self._pipe, self._watcher, self.stopped = None, None, True
        if _current is self:
            _current = None

    def stop(self, reason: str, failure: BaseException | None = None) -> None:
        """Dump one last time, then put back the handlers and the wakeup fd as they were."""
        global _current
        self.dump(reason, failure)
        self.stopped = True
        if _current is self:
            _current = None
        if threading.current_thread() is threading.main_thread():
            for signum, previous in self._previous.items():
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            if self._pipe is not None:
                signal.set_wakeup_fd(-1)
        self._previous.clear()
        self._stopping.set()
        if self._pipe is not None:
            try:
                os.write(self._pipe[1], b"\0")  # wake the watcher
            except OSError:
                pass
        if self._watcher is not None:
            self._watcher.join(timeout=POLL_S * 2)
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None

    # --- dumping -----------------------------------------------------------------------------

    def dump(self, reason: str, failure: BaseException | None = None) -> list[Path]:
        """Write every recorder of this process as JSON, with the collector's section; return the
        files. `failure` is the exception the job ends by, if it does."""
        written = []
        with self._lock:
            now = time.time_ns()
            for recorder, dump_json in _recorders():
                try:
                    data = json.loads(dump_json())
                    if recorder != "generic" and not data.get(fr.ENTRIES) and not data.get(fr.PG_STATUS):
                        continue  # a build with NCCL whose job never used it
                    data[fr.SECTION] = self._section(recorder, reason, now, failure)
                    written.append(self._write(fr.dump_name(self.rank, recorder), data))
                except Exception as problem:  # the job must outlive a failed dump
                    self.failures.append(f"{recorder} dump ({reason}): {''.join(traceback.format_exception_only(problem)).strip()}")
            self._earlier.append({fr.REASON: reason, fr.DUMPED_AT_NS: now})
        return written

    def _section(self, recorder: str, reason: str, now: int, failure: BaseException | None) -> dict:
        try:
            buffer = int(os.environ.get(ENV_BUFFER, "0"))
        except ValueError:
            buffer = None
        return {
            fr.RANK: self.rank,
            fr.WORLD_SIZE: self.world_size,
            fr.HOST: host.hostname(),
            fr.PID: os.getpid(),
            fr.RECORDER: recorder,
            fr.REASON: reason,
            fr.DUMPED_AT_NS: now,
            fr.BUFFER_ENTRIES: buffer,
            fr.GROUPS: self._known_groups(),
            fr.STACKS: _stacks(failure),
            fr.EARLIER: list(self._earlier),
        }

    def _known_groups(self) -> list[dict]:
        """The process groups now, or as last seen when the job has destroyed them (an exit dump)."""
        self._groups = _process_groups() or self._groups
        return self._groups

    def _write(self, name: str, data: dict) -> Path:
        """Write a dump so that a reader sees the old file or the whole new one."""
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / name
        temporary = target.with_name(f".{name}.{uuid.uuid4().hex}.tmp")
        temporary.write_text(json.dumps(data, separators=(",", ":")))
        os.replace(temporary, target)
        return target

    # --- signals -----------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame) -> None:
        """The main thread's handler: the watcher dumps (or, without one, this does), then SIGTERM
        goes on to what handled it before."""
        watched = self._watcher is not None and self._watcher.is_alive() and self._pipe is not None
        if signum == ENDING:
            self._ending_handled.set()
            if watched:
                self._ending_dumped.wait(DUMP_WAIT_S)
        if not watched and not (signum in CONTINUING and self._ending_handled.is_set()):
            self.dump(signal.Signals(signum).name)
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif signum == ENDING and previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _watch(self) -> None:
        """Dump as soon as a signal arrives or NCCL's watchdog writes its timeout dump."""
        prefix = os.environ.get(ENV_TORCH_DUMP)
        nccl_timeout = Path(f"{prefix}{self.rank}") if prefix else None
        seen_timeout = nccl_timeout is not None and nccl_timeout.exists()
        while not self._stopping.is_set():
            ready = self._pipe is not None and select.select([self._pipe[0]], [], [], POLL_S)[0]
            if not ready:
                if self._pipe is None:
                    self._stopping.wait(POLL_S)
                if nccl_timeout is not None and not seen_timeout and nccl_timeout.exists():
                    seen_timeout = True
                    self.dump(f"NCCL watchdog timeout (torch wrote {nccl_timeout.name})")
                continue
            try:
                arrived = os.read(self._pipe[0], 64)
            except OSError:
                return
            for signum in arrived:
                if signum == ENDING:
                    self.dump(signal.Signals(signum).name)
                    self._ending_dumped.set()
                    self._end_if_main_thread_is_stuck()
                elif signum in CONTINUING and not self._ending_dumped.is_set():
                    # Once SIGTERM has dumped, the process is ending: a SIGINT after it (what
                    # torch.multiprocessing's spawn children get when their parent dies) would
                    # replace that dump.
                    self.dump(signal.Signals(signum).name)

    def _end_if_main_thread_is_stuck(self) -> None:
        """SIGTERM ends the process; if the main thread has not started on it after a grace
        period, it is stuck outside Python, and the process ends here (status 128 + SIGTERM)."""
        if self._previous.get(ENDING) == signal.SIG_IGN:
            return
        if not self._ending_handled.wait(MAIN_THREAD_GRACE_S):
            sys.stderr.flush()
            os._exit(128 + ENDING)


def _recorders() -> list[tuple[str, object]]:
    """(recorder, its JSON dump function): the generic one (gloo, CPU), and NCCL's on builds with
    it; none on a torch without distributed support or without JSON dumps."""
    import torch

    c10d = getattr(torch._C, "_distributed_c10d", None)
    functions = (("generic", "_dump_fr_trace_json"), ("nccl", "_dump_nccl_trace_json"))
    return [(recorder, getattr(c10d, name)) for recorder, name in functions if hasattr(c10d, name)]


def _process_groups() -> list[dict]:
    """Every process group this rank belongs to, with its global ranks: torch's gloo backend
    records none in its dump's pg_config."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d

        if not (dist.is_available() and dist.is_initialized()):
            return []
        groups = []
        for group, name in list(distributed_c10d._world.pg_names.items()):  # the only list of groups torch keeps
            groups.append({
                fr.PG_NAME: name,
                fr.PG_DESC: getattr(group, "group_desc", None),
                fr.PG_RANKS: dist.get_process_group_ranks(group),
            })
        return groups
    except Exception:  # a dump without members still says what every rank recorded
        return []


def _stacks(failure: BaseException | None = None) -> list[dict]:
    """Each thread's Python stack, innermost frame first, the main thread first. The collector's
    own frames (a signal handler, the exit of `Capture`) and what they called are left out, and the
    main thread's stack is the one `failure` was raised in, when the dump is for an exception:
    that is where the rank was waiting."""
    names = {thread.ident: thread for thread in threading.enumerate()}
    main = threading.main_thread().ident
    here = threading.get_ident()
    current = sys._current_frames()
    if failure is not None and failure.__traceback__ is not None:
        raised = failure.__traceback__
        while raised.tb_next is not None:
            raised = raised.tb_next
        current[main] = raised.tb_frame
    stacks = []
    for ident, frame in sorted(current.items(), key=lambda item: item[0] != main):
        if ident == here and ident != main:
            continue
        frames = []
        while frame is not None and len(frames) < MAX_FRAMES:
            if frame.f_code.co_filename in _OWN_FILES:
                frames.clear()  # everything inner to the collector's own frames is the collector's
            else:
                frames.append({"name": frame.f_code.co_name, "filename": frame.f_code.co_filename, "line": frame.f_lineno})
            frame = frame.f_back
        if not frames:
            continue  # a thread of the collector's own (the watcher)
        thread = names.get(ident)
        stacks.append({"thread": thread.name if thread else str(ident), "main": ident == main, "frames": frames})
        if len(stacks) == MAX_THREADS:
            break
    return stacks


# Frames of these files are the collector's, not the job's.
_OWN_FILES = (__file__, str(Path(__file__).with_name("capture.py")), str(Path(__file__).parent / "inject" / "sitecustomize.py"))
_current: Recorder | None = None
