"""HTA's whole analysis of a trace folder, timed from outside as one process; runs in HTA's virtualenv.

Standalone on purpose (HTA pins its own pandas and numpy): the load, then the two analyses that
answer what wirespeed answers, communication/computation overlap and the temporal breakdown.
It prints how many ranks HTA kept, for the benchmark to tell a partial load from a whole one.
"""

import json
import sys

from hta.trace_analysis import TraceAnalysis


def main() -> None:
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
    analysis.get_comm_comp_overlap(visualize=False)
    analysis.get_temporal_breakdown(visualize=False)
    print(json.dumps({"ranks": len(analysis.t.get_all_traces())}))


if __name__ == "__main__":
    main()
