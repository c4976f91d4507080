"""Time HTA's `TraceAnalysis()` load of a trace folder; runs inside HTA's own virtualenv.

Standalone on purpose: HTA pins its own pandas and numpy, so this file imports nothing from
wirespeed. It prints one JSON line: seconds of the load (imports excluded), peak memory of this
process and of the worker processes HTA starts, and how many ranks and events HTA kept: HTA files
a trace whose rank it cannot find as rank 0, keeps one file per rank, and drops the others
without failing.
"""

import json
import resource
import sys
import time


def main() -> None:
    trace_dir = sys.argv[1]
    from hta.trace_analysis import TraceAnalysis

    started = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=trace_dir)
    seconds = time.perf_counter() - started
    traces = analysis.t.get_all_traces()
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    events = sum(len(frame) for frame in traces.values())
    print(json.dumps({"seconds": seconds, "peak_bytes": own + workers, "ranks": len(traces), "events": events}))


if __name__ == "__main__":
    main()
