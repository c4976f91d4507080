"""The `wirespeed` command line.

    wirespeed collect --landing DIR [--run-id ID] -- COMMAND...   capture a training run
        [--nnodes N]                                              (on each of N hosts, same run id)
        [--traces DIR]                                            (take the traces the job writes there)
    wirespeed ingest PATH... [--warehouse DIR]                    ingest runs (Dagster, in-process)
        [--step-annotation NAME]                                  (each instance of NAME is a step)
    wirespeed sql "QUERY" [--format table|csv|json] [--run ID]... query the warehouse (those runs only)
    wirespeed report RUN_ID [-o FILE]                             write a run's HTML report
    wirespeed report --fleet [-o FILE]                            write the report of every job's runs
    wirespeed compare RUN_A RUN_B [--format table|json]           what changed from one run to another
    wirespeed demo [--cluster | --single-host]                    capture, ingest and judge a demo run

Heavy imports (dagster, duckdb, torch) happen inside the subcommands that need them, so that
`wirespeed collect` starts fast inside a training job's environment.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from pathlib import Path

from pipelines.folders import landing_dir, warehouse_dir

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _tags(values: list[str]) -> dict[str, str]:
    tags = {}
    for value in values:
        key, separator, text = value.partition("=")
        if not separator or not key:
            raise SystemExit(f"--tag takes KEY=VALUE, not {value!r}")
        tags[key] = text
    return tags


def cmd_collect(args: argparse.Namespace) -> int:
    from collectors import rundir
    from collectors.launch import collect

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("give the training command after --, e.g. wirespeed collect --landing runs -- torchrun train.py")
    tags = _tags(args.tag)
    if args.job:
        tags["job"] = args.job
    run_dir, exit_code = collect(
        landing_dir(args.landing), command, args.run_id, args.link_gbps, tags, args.intra_link_gbps, args.sample_interval_ms,
        args.nnodes, traces=args.traces,
    )
    missing = "" if rundir.has_traces(run_dir) else "; no traces: pass --traces DIR, or use Capture"
    print(f"run folder: {run_dir} (command exited with {exit_code}){missing}")
    return exit_code


def cmd_ingest(args: argparse.Namespace) -> int:
    from pipelines.commands.ingest import ingest_paths

    if args.run_id and len(args.paths) != 1:
        raise SystemExit("--run-id names one run: give exactly one PATH with it")
    if args.step_annotation == "":
        raise SystemExit("--step-annotation takes an annotation's name, not an empty one")
    overrides = {
        name: value
        for name, value in (
            ("link_gbps", args.link_gbps), ("intra_link_gbps", args.intra_link_gbps), ("link_interface", args.link_interface),
            ("step_annotation", args.step_annotation),
        )
        if value is not None
    }
    results = ingest_paths(
        [Path(p) for p in args.paths], warehouse_dir(args.warehouse), args.run_id, progress=not args.quiet, overrides=overrides
    )
    failed = [r for r in results if not r.success]
    for result in results:
        print(result.describe())
    return 1 if failed else 0


def cmd_sql(args: argparse.Namespace) -> int:
    from pipelines.commands.query import print_query

    print_query(warehouse_dir(args.warehouse), args.query, args.format, sys.stdout, args.runs)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines import settings
    from pipelines.report import report_run
    from pipelines.warehouse.store import Warehouse

    store = Warehouse(warehouse_dir(args.warehouse))
    store.ensure()
    output = Path(args.output) if args.output else None
    if args.fleet == bool(args.run_id):
        raise SystemExit("wirespeed report: give a RUN_ID or --fleet")
    if args.fleet:
        from pipelines.report.fleet import report_fleet

        print(report_fleet(store, settings.load(store.root), output))
    else:
        print(report_run(store, settings.load(store.root), args.run_id, output))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from pipelines import settings
    from pipelines.commands.compare import compare, print_comparison
    from pipelines.warehouse.store import Warehouse

    store = Warehouse(warehouse_dir(args.warehouse))
    store.ensure()
    print_comparison(compare(store, settings.load(store.root), args.run_a, args.run_b), args.format, sys.stdout)
    return 0


def cmd_whatif(args: argparse.Namespace) -> int:
    from pipelines.commands.whatif import print_rows, whatif_rows

    print_rows(whatif_rows(args, warehouse_dir(args.warehouse)), args.format, sys.stdout)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from pipelines.commands.demo import run_demo

    where = "cluster" if args.cluster else "single-host" if args.single_host else "auto"
    return run_demo(warehouse_dir(args.warehouse), landing_dir(args.landing), EXAMPLES, where)


def cmd_scale_demo(args: argparse.Namespace) -> int:
    import json

    from pipelines.testbed.deployment import missing, scale_demo

    reason = missing()
    if reason:
        raise LookupError(f"the deployment cannot be brought up here: {reason}")
    result = scale_demo(args.small_runs, args.ranks, args.timeout)
    print(json.dumps(result))
    good = result["identical_tables"] and len(result["workers"]) >= 2 and result["runs_ingested"] == result["runs_landed"]
    return 0 if good else 1


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="wirespeed", description="Is the network the bottleneck of your distributed PyTorch run?")
    commands = top.add_subparsers(dest="subcommand", required=True)

    collect = commands.add_parser("collect", help="run a training command and capture its traces into a run folder")
    collect.add_argument("--landing", help="folder that receives run folders (default: $WIRESPEED_LANDING or ./landing)")
    collect.add_argument("--run-id", help="name of the run folder (default: a UTC timestamp and a random suffix)")
    collect.add_argument("--link-gbps", type=float, help="network line rate per host in Gbit/s, overriding what the OS says")
    collect.add_argument("--intra-link-gbps", type=float, help="line rate between ranks of one host (NVLink, ...), Gbit/s")
    collect.add_argument(
        "--sample-interval-ms", type=float, default=100, help="network and CPU counter sampling interval; 0 turns it off"
    )
    collect.add_argument(
        "--nnodes", type=int, default=1,
        help="hosts taking part: run collect on each with the same --run-id; the last to finish writes the manifest",
    )
    collect.add_argument(
        "--traces", action="append", default=[], metavar="DIR",
        help="a folder (a glob allowed) where the job writes its own traces: those it writes while it runs are "
             "copied into the run folder (repeatable)",
    )
    collect.add_argument("--job", help="job tag, to group runs of one job (same as --tag job=NAME)")
    collect.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="a tag for the manifest (repeatable)")
    collect.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    collect.set_defaults(run=cmd_collect)

    warehouse_help = "warehouse folder (default: $WIRESPEED_HOME or ./warehouse)"
    ingest = commands.add_parser("ingest", help="ingest run folders, trace folders or trace files")
    ingest.add_argument("paths", nargs="+", metavar="PATH")
    ingest.add_argument("--warehouse", help=warehouse_help)
    ingest.add_argument("--run-id", help="run id for a single PATH (default: manifest, folder or file name)")
    ingest.add_argument("--link-gbps", type=float, help="line rate of the hosts' network link, Gbit/s (overrides the manifest)")
    ingest.add_argument("--intra-link-gbps", type=float, help="line rate between ranks of one host, Gbit/s")
    ingest.add_argument("--link-interface", help="interface (as sampled) that the link rate applies to, e.g. eth0")
    ingest.add_argument(
        "--step-annotation", metavar="NAME",
        help="each instance of the annotation whose name holds NAME is a step, numbered 0, 1, 2, ... on each rank "
             "(default: wirespeed.toml [steps] annotation, else ProfilerStep#<n>)",
    )
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest.set_defaults(run=cmd_ingest)

    query = commands.add_parser("sql", help="run SQL against the warehouse (DuckDB dialect)")
    query.add_argument("query")
    query.add_argument("--warehouse", help=warehouse_help)
    query.add_argument("--format", choices=("table", "csv", "json"), default="table")
    query.add_argument("--run", action="append", dest="runs", metavar="RUN_ID",
                       help="only this run's rows in the per-run tables (repeatable); the roll-ups stay whole. "
                            "The query reads only these runs' files, however many the warehouse holds")
    query.set_defaults(run=cmd_sql)

    report = commands.add_parser("report", help="write a run's standalone HTML report")
    report.add_argument("run_id", metavar="RUN_ID", nargs="?")
    report.add_argument("--fleet", action="store_true", help="every job's runs over time, their regressions and scaling")
    report.add_argument("-o", "--output", help="file to write (default: the warehouse's reports folder)")
    report.add_argument("--warehouse", help=warehouse_help)
    report.set_defaults(run=cmd_report)

    versus = commands.add_parser("compare", help="what changed in the typical step from one run to another, and why")
    versus.add_argument("run_a", metavar="RUN_A", help="the run before")
    versus.add_argument("run_b", metavar="RUN_B", help="the run after")
    versus.add_argument("--format", choices=("table", "json"), default="table")
    versus.add_argument("--warehouse", help=warehouse_help)
    versus.set_defaults(run=cmd_compare)

    what = commands.add_parser("whatif", help="predict a run's step at other line rates, compressions and rank counts")
    what.add_argument("run_id", nargs="?", metavar="RUN_ID", help="replay this run's own steps")
    what.add_argument("--model", choices=("replay", "paper"), default="replay",
                      help="replay: every collective of every step (default); paper: the gradient buckets through one "
                           "all-reduce channel, as the paper's model (always, with --timeline)")
    what.add_argument("--at-line-rate", action="store_true",
                      help="replay: every transfer at the link's full line rate, not at the share of it the run achieved")
    what.add_argument("--timeline", help="or a CSV with header ready_us,bytes: one gradient per row, in ready order")
    what.add_argument("--ranks", help="rank counts N (default: the run's N, 8N, 64N; 16,32,64 for a timeline)")
    what.add_argument("--bandwidth", help="line rates in Gbit/s (default: 1,10,25,40,100,200,400)")
    what.add_argument("--compression", help="compression ratios, at least 1 (default: 1,2,5,10)")
    what.add_argument("--compute-ms", type=float, help="step time without communication, t_1 (required with --timeline)")
    what.add_argument("--baseline", metavar="RUN_ID", help="take t_1 from this run's median step (e.g. one device)")
    what.add_argument("--fusion", choices=("horovod", "ddp", "none", "observed"),
                      help="how gradients become buckets (default: observed for a run, horovod for a timeline)")
    what.add_argument("--cycle-ms", type=float, default=5.0, help="horovod: cycle time (default 5)")
    what.add_argument("--fusion-mib", type=float, default=64.0, help="horovod: fusion buffer size (default 64)")
    what.add_argument("--bucket-mib", type=float, default=25.0, help="ddp: bucket cap (default 25)")
    what.add_argument("--reduce-cost", help="CSV rows bytes,seconds: the device's time to add that many bytes")
    what.add_argument("--target", default="0.95,0.99", help="scaling factors to reach (default 0.95,0.99)")
    what.add_argument("--format", choices=("table", "csv", "json"), default="table")
    what.add_argument("--warehouse", help=warehouse_help)
    what.set_defaults(run=cmd_whatif)

    demo = commands.add_parser("demo", help="capture a 2-rank gloo DDP run, ingest it with a real A100 trace, write reports")
    demo.add_argument("--warehouse", help=warehouse_help)
    demo.add_argument("--landing", help="folder for the captured run (default: $WIRESPEED_LANDING or ./landing)")
    where = demo.add_mutually_exclusive_group()
    where.add_argument(
        "--cluster", action="store_true",
        help="capture on two emulated hosts (network namespaces, 1 Gbit/s link; needs root, ip and tc), or fail; "
             "the default when the machine allows",
    )
    where.add_argument("--single-host", action="store_true", help="capture on this host, over loopback (a line rate assumed)")
    demo.set_defaults(run=cmd_demo)

    scale = commands.add_parser(
        "scale-demo",
        help="bring deploy/ up on three emulated hosts (PostgreSQL, Redis, daemon, two Celery workers), ingest through it, "
             "print what it saw as JSON (needs root, postgresql, redis-server)",
    )
    scale.add_argument("--ranks", type=int, default=16, help="ranks of the large run (default 16)")
    scale.add_argument("--small-runs", type=int, default=20, help="small runs landed at once (default 20)")
    scale.add_argument("--timeout", type=float, default=900, help="seconds to wait for each landing's ingest (default 900)")
    scale.set_defaults(run=cmd_scale_demo)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (FileNotFoundError, FileExistsError, LookupError, ValueError) as problem:
        print(f"wirespeed {args.subcommand}: {problem}", file=sys.stderr)
        return 2


def run() -> None:
    """The `wirespeed` command: `main`, then an exit that skips tearing the interpreter down.

    Once the threads are joined and the exit handlers have run, as at any exit, freeing DuckDB's
    databases and every module's objects would only cost time: 40-50 ms of each command, a tenth
    of a report's. An error or `--help` exits the usual way; output to a reader that stopped
    reading (`| head`) ends the command quietly, with the interpreter's status for it. The first
    two steps are CPython's own exit steps, private to it (the project pins Python 3.11).
    """
    try:
        code = main()
    except BrokenPipeError:  # the reader left early (`| head`): what it read is what it wanted
        code = 120
    threading._shutdown()  # what the interpreter does first at exit: join the threads, shut executors down
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: the status the interpreter would give
        code = 120
    os._exit(code)


if __name__ == "__main__":
    run()
