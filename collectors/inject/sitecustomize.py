"""Arms the Flight Recorder in every Python process of a job run by `wirespeed collect`, with no code in the job.

`wirespeed collect` puts this folder first on the job's PYTHONPATH, and Python imports the first
`sitecustomize` on its path as it starts, in every process: the launcher, `torch.multiprocessing`
children, `torchrun` workers. Here it then:

1. runs the `sitecustomize` the job would have run without wirespeed (the next one on the path),
   so that the job's own start-up is unchanged;
2. with `WIRESPEED_RUN_DIR` set, waits for `torch.distributed.distributed_c10d` to be imported
   (one finder on `sys.meta_path`, which looks at nothing else), and wraps its
   `init_process_group`: once a process has made its default process group, a recorder is armed
   in it (collectors/flight_recorder.py `arm`; none when `Capture` armed one). A process that
   never makes a process group (a launcher, a data worker, a tool) gets nothing else.

Nothing here may break the job: any failure is one line on stderr, and the job goes on. This
folder holds this file only, so that it shadows none of the job's modules.
"""

import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))  # the folder that holds `collectors`
_WATCHED = "torch.distributed.distributed_c10d"


def _run_the_jobs_own() -> None:
    """Execute the next `sitecustomize` on the path, as Python would have without this one."""
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    import importlib.util  # only here: it costs milliseconds at every start

    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


class _Watch:
    """Finds nothing itself: when `_WATCHED` is about to load, wraps its loader so that
    `init_process_group` is patched the moment the module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != _WATCHED:
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        if spec is not None and spec.loader is not None:
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                try:
                    _patch(module)
                except Exception as failure:  # another torch: the job must not notice
                    _warn(failure)

            spec.loader.exec_module = exec_module
        return spec


def _patch(module) -> None:
    original = module.init_process_group

    def init_process_group(*args, **kwargs):
        result = original(*args, **kwargs)
        _arm()
        return result

    init_process_group.__wrapped__ = original
    for attribute in ("__name__", "__qualname__", "__doc__", "__module__"):
        setattr(init_process_group, attribute, getattr(original, attribute, None))
    module.init_process_group = init_process_group


def _arm() -> None:
    try:
        added = _ROOT not in sys.path
        if added:
            sys.path.append(_ROOT)  # last: the job's own modules come first
        try:
            from collectors import flight_recorder
        finally:
            if added:  # nothing else of wirespeed's environment leaks into the job's
                sys.path.remove(_ROOT)

        if os.path.dirname(os.path.dirname(os.path.abspath(flight_recorder.__file__))) != _ROOT:
            raise ImportError(f"the job's own `collectors` ({flight_recorder.__file__}) hides wirespeed's")
        flight_recorder.arm(os.environ["WIRESPEED_RUN_DIR"])
    except Exception as failure:  # the job must not notice
        _warn(failure)


def _warn(failure: Exception) -> None:
    print(f"wirespeed: the Flight Recorder is not armed in process {os.getpid()}: {failure!r}", file=sys.stderr)


try:
    _run_the_jobs_own()
finally:
    if os.environ.get("WIRESPEED_RUN_DIR") and _WATCHED not in sys.modules:
        sys.meta_path.insert(0, _Watch())
