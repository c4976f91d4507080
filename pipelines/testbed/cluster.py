"""An emulated cluster on one machine: hosts as network namespaces behind a shaped switch.

Multi-node behaviour (one `wirespeed collect` per host, each host's own NIC counters, a line rate
the network really holds to) cannot be tested on loopback. Each host here is a network namespace
with one NIC, `eth0` (one end of a veth pair), addressed 198.18.0.<i+1>/24 (198.18.0.0/15 is
reserved for benchmarking, so no real network is ever addressed); the other end of every veth is
a port of a bridge in a separate "switch" namespace. A token bucket (`tc ... tbf`) on both ends
of each veth shapes the link in both directions, draining no faster than its line rate. Processes
started on a host also get their own UTS namespace, so `hostname` (and with it every per-host file
in a run folder) differs per host.

    with Cluster(hosts=2, link_mbit=200) as cluster:
        cluster.run(0, ["hostname"])            # -> host0

Everything is created under names with a random suffix (parallel and leftover runs never
clash) and deleted on exit, on an exception, on SIGTERM and at interpreter exit.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from collectors.sampler import core_ticks

SUBNET_PREFIX = "198.18.0."
SUBNET_BITS = 24
INTERFACE = "eth0"
BRIDGE = "br0"
# A token bucket holding 2 ms at line rate keeps the rate within a few percent over 100 ms windows
# from 100 Mbit/s to 10 Gbit/s; 50 ms of queue lets TCP fill the pipe without losses at the lowest
# rate. It never holds less than four GSO super-packets: a bucket of one (64 KB) makes the kernel
# burn CPU on every send while it refills (a 16 MB gloo all-reduce at 200 Mbit/s cost its process
# 192 ms of system time with 64 KB, 16 ms with 250 KB, 8 ms at 1 Gbit/s), and on a small machine
# that slows the job's compute whenever the link is slow. A full bucket drains at the peak rate, a
# hair above line rate, as a NIC serialises it: drained at once, it let a 1 MB send after 30 ms idle
# arrive in 6.0 ms at 1 Gbit/s (8.4 at line rate) and 32.8 ms at 200 Mbit/s (41.9); capped, 7.6 and
# 38.8 ms. Its own bucket holds one GSO super-packet (40 such sends at 200 Mbit/s cost the sender
# 23 ms of system time, 15 ms uncapped), or 0.25 ms at the line rate where that is more: with one
# super-packet TCP's goodput fell to 87 % of 5 Gbit/s and 75 % of 10 Gbit/s.
TBF_BURST_S = 0.002
TBF_MIN_BURST_BYTES = 256 * 1024
TBF_LATENCY_MS = 50
TBF_PEAK_RATE = 1.05  # times the line rate
TBF_PEAK_MIN_BUCKET_BYTES = 70_000  # a 64 KB GSO super-packet and its headers
TBF_PEAK_BUCKET_S = 0.00025
REPO = Path(__file__).resolve().parents[2]


def unavailable_reason() -> str | None:
    """Why this machine cannot build a cluster (None when it can): root, ip, tc, unshare, netns."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs and tc qdiscs are privileged)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 util-linux)"
    probe = f"wsprobe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass(frozen=True)
class Host:
    index: int
    name: str
    namespace: str
    address: str


def bucket_bytes(link_mbit: float, seconds: float, least: int) -> int:
    """A token bucket holding `seconds` at the line rate, and at least `least` bytes."""
    return max(least, int(link_mbit * 1e6 / 8 * seconds))


class Cluster:
    """`hosts` hosts, each with one `link_mbit` link to a shared switch."""

    def __init__(self, hosts: int = 2, link_mbit: float = 1000, name_prefix: str = "host"):
        if not 1 <= hosts <= 250:
            raise ValueError("a cluster has 1 to 250 hosts")
        suffix = uuid.uuid4().hex[:6]
        self.link_mbit = link_mbit
        self.switch_namespace = f"ws-{suffix}-switch"
        self.hosts = [
            Host(i, f"{name_prefix}{i}", f"ws-{suffix}-{name_prefix}{i}", f"{SUBNET_PREFIX}{i + 1}") for i in range(hosts)
        ]
        self._created: list[str] = []
        self._children: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._previous_sigterm = None

    # --- building and tearing down -----------------------------------------------------------

    def __enter__(self) -> Cluster:
        atexit.register(self.teardown)
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.teardown()

    def _build(self) -> None:
        switch = self.switch_namespace
        self._add_namespace(switch)
        _ip("-n", switch, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", switch, "link", "set", BRIDGE, "up")
        for host in self.hosts:
            self._add_namespace(host.namespace)
            port = f"p{host.index}"
            # Created inside the namespaces: no name ever appears in the machine's own namespace.
            _ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", INTERFACE, "netns", host.namespace)
            _ip("-n", switch, "link", "set", port, "master", BRIDGE, "up")
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/{SUBNET_BITS}", "dev", INTERFACE)
            _ip("-n", host.namespace, "link", "set", INTERFACE, "up")
            self._shape(host.namespace, INTERFACE)  # host -> switch
            self._shape(switch, port)  # switch -> host

    def _add_namespace(self, namespace: str) -> None:
        _ip("netns", "add", namespace)
        self._created.append(namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")

    def _shape(self, namespace: str, device: str) -> None:
        burst = bucket_bytes(self.link_mbit, TBF_BURST_S, TBF_MIN_BURST_BYTES)
        peak_bucket = bucket_bytes(self.link_mbit, TBF_PEAK_BUCKET_S, TBF_PEAK_MIN_BUCKET_BYTES)
        _run(["tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "tbf",
              "rate", f"{self.link_mbit}mbit", "burst", str(burst), "latency", f"{TBF_LATENCY_MS}ms",
              "peakrate", f"{self.link_mbit * TBF_PEAK_RATE}mbit", "mtu", str(peak_bucket)])

    def teardown(self) -> None:
        """Stop every process started on a host, then delete every namespace (and so every link)."""
        with self._lock:
            for child in self._children:
                if child.poll() is None:
                    _kill_group(child)
            self._children.clear()
            for namespace in reversed(self._created):
                # A namespace lives on while a process is inside it: kill stragglers first.
                pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
            self._created.clear()
            if self._previous_sigterm is not None:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
                self._previous_sigterm = None
        atexit.unregister(self.teardown)

    def namespaces(self) -> list[str]:
        return [self.switch_namespace, *(h.namespace for h in self.hosts)]

    # --- running commands on a host ------------------------------------------------------------

    def command(self, index: int, argv: list[str]) -> list[str]:
        """`argv` as run on host `index`: inside its network namespace, under its own hostname."""
        host = self.hosts[index]
        return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host.name, *argv]

    def popen(self, index: int, argv: list[str], **popen_args) -> subprocess.Popen:
        """Start `argv` on host `index` in its own process group (so teardown can stop all of it)."""
        child = subprocess.Popen(self.command(index, argv), start_new_session=True, **popen_args)
        with self._lock:
            self._children.append(child)
        return child

    def run(self, index: int, argv: list[str], timeout: float | None = None, **popen_args) -> subprocess.CompletedProcess:
        """Run `argv` on host `index` to completion; output is captured as text unless redirected."""
        popen_args.setdefault("text", True)
        if "stdout" not in popen_args and "stderr" not in popen_args:
            popen_args.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child = self.popen(index, argv, **popen_args)
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(child)
            raise
        return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


def _exit_on_sigterm(signum, _frame):
    raise SystemExit(128 + signum)


def _kill_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def _ip(*args: str) -> None:
    _run(["ip", *args])


# --- a real training job across the cluster, as users capture one ----------------------------

JOB_PORT = 29500
# A run is quiet when the hypervisor took at most this share of the machine's CPU time during it
# (1.3-2.6 % on average since a machine started; 9-24 % over six FSDP2 runs in a busy spell, whose
# fast runs' steps were half as long again as in a quiet one). At 5 %, DDP's buckets at 1 Gbit/s
# judged a run that lost 5 % and took 98 ms a step beside its quiet twin's 77: ten times as long
# at 100 Mbit/s, its step came out +35 %, and the median over pairs +22.5 % (+9.0 % on the quiet one).
QUIET_STEAL_SHARE = 0.03


def cpu_ticks() -> tuple[int, int]:
    """The machine's CPU ticks so far: all of them, and those the hypervisor took."""
    (_, ticks), *_ = core_ticks()
    return sum(ticks), ticks[7]


@dataclass(frozen=True)
class ClusterJobRun:
    run_dir: Path
    step_ns: dict[int, list[int]]  # rank -> every step's time, by the job's own wall clock
    wall_ns: int  # from starting the hosts' `wirespeed collect` to the last one's exit
    steal_share: float  # of the machine's CPU time during the run, what the hypervisor took

    @property
    def steady_step_ns(self) -> list[int]:
        """Every rank's steps after the first two (warm-up), sorted."""
        return sorted(t for times in self.step_ns.values() for t in times[2:])

    @property
    def median_step_ns(self) -> int:
        return int(statistics.median(self.steady_step_ns))

    @property
    def mean_step_ns(self) -> float:
        """The mean step: other work on the machine only ever lengthens a run, while a single step
        by the job's clock moves with where the ranks' steps begin (one short, the next long)."""
        return statistics.fmean(self.steady_step_ns)


def run_job(job: str, link_mbit: float, landing: Path, steps: int = 8, run_id: str | None = None,
            timeout_s: float = 180, hosts: int = 2, job_args: tuple[str, ...] = (), ranks_per_host: int = 1) -> ClusterJobRun:
    """Run one `collectors.jobs` job on a fresh cluster of `hosts` hosts, `ranks_per_host` ranks on
    each, each host under `wirespeed collect --nnodes <hosts> --link-gbps <rate>`, into `landing`;
    `job_args` go to the job (`--straggler-ms 100`). Ranks of one host talk over its loopback,
    which no `tc` shapes."""
    run_id = run_id or f"{job}-{link_mbit:g}mbit-{uuid.uuid4().hex[:6]}"
    landing = Path(landing).absolute()
    with Cluster(hosts=hosts, link_mbit=link_mbit) as cluster:
        master = cluster.hosts[0].address
        environment = {**os.environ, "GLOO_SOCKET_IFNAME": INTERFACE, "PYTHONPATH": str(REPO)}
        started, ticks_before = time.perf_counter_ns(), cpu_ticks()
        children = []
        for host in cluster.hosts:
            argv = [
                sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(landing), "--run-id", run_id,
                "--nnodes", str(hosts), "--link-gbps", f"{link_mbit / 1000:g}", "--job", job, "--",
                sys.executable, "-m", "collectors.jobs", "--job", job, "--nnodes", str(hosts), "--node-rank", str(host.index),
                "--nproc-per-node", str(ranks_per_host), "--master-addr", master, "--master-port", str(JOB_PORT), "--steps", str(steps),
                *job_args,
            ]
            children.append(cluster.popen(host.index, argv, cwd=REPO, env=environment, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        outputs = [child.communicate(timeout=timeout_s) for child in children]
        wall_ns = time.perf_counter_ns() - started
        ticks, stolen = (after - before for after, before in zip(cpu_ticks(), ticks_before))
    for child, (stdout, stderr) in zip(children, outputs):
        if child.returncode != 0:
            raise RuntimeError(f"{job} at {link_mbit} Mbit/s failed ({child.returncode}):\n{stdout}\n{stderr[-4000:]}")
    step_ns = {}
    for stdout, _ in outputs:
        for line in stdout.splitlines():
            if line.startswith('{"wirespeed_job"'):
                record = json.loads(line)
                step_ns[record["rank"]] = record["step_ns"]
    return ClusterJobRun(landing / run_id, step_ns, wall_ns, stolen / ticks if ticks else 0.0)


@dataclass(frozen=True)
class RatePair:
    """A run at the slow rate and the run at the fast rate right after it."""

    slow: ClusterJobRun
    fast: ClusterJobRun


@dataclass(frozen=True)
class LinkCost:
    """What a link really costs a job: its step at two line rates, measured in turn (A B A B ...).

    Other work on a shared 2-core machine (the hypervisor took 3-21 % of its CPU time during one
    run or another) slows runs for seconds at a time, the fast runs most, whose CPUs are busier: a
    tensor-parallel job's lower-quartile step at 1 Gbit/s measured 166-283 ms over six runs in a row.
    Disturbances only lengthen runs, so the cost comes from each rate's least disturbed run.
    """

    slow_mbit: float
    fast_mbit: float
    pairs: tuple[RatePair, ...]

    @property
    def runs(self) -> list[ClusterJobRun]:
        return [run for pair in self.pairs for run in (pair.slow, pair.fast)]

    @property
    def quietest_slow(self) -> ClusterJobRun:
        """The least disturbed run at the slow rate: the shortest mean step."""
        return min((pair.slow for pair in self.pairs), key=lambda run: run.mean_step_ns)

    @property
    def quietest_fast(self) -> ClusterJobRun:
        """The least disturbed run at the fast rate: the shortest mean step."""
        return min((pair.fast for pair in self.pairs), key=lambda run: run.mean_step_ns)

    @property
    def quiet(self) -> bool:
        """Whether each rate's least disturbed run lost at most QUIET_STEAL_SHARE to the hypervisor."""
        return max(self.quietest_slow.steal_share, self.quietest_fast.steal_share) <= QUIET_STEAL_SHARE

    def judged(self) -> tuple[list[ClusterJobRun], list[ClusterJobRun]]:
        """Each rate's runs that lost at most QUIET_STEAL_SHARE to the hypervisor, or its least
        disturbed one where none did: FSDP2 over two ranks per host, its runs losing 12-19 %, came
        out +45 % at 200 Mbit/s from 1 Gbit/s, +1.8 % from quiet runs; a round of `pp-isend` whose
        six slow runs all lost 5-13 % came out +26.3 % at 1 Gbit/s judged on all of them, +1.3 %
        on the least disturbed."""
        def quiet_or_quietest(runs: list[ClusterJobRun], quietest: ClusterJobRun) -> list[ClusterJobRun]:
            return [run for run in runs if run.steal_share <= QUIET_STEAL_SHARE] or [quietest]

        return (quiet_or_quietest([pair.slow for pair in self.pairs], self.quietest_slow),
                quiet_or_quietest([pair.fast for pair in self.pairs], self.quietest_fast))

    @property
    def link_ns(self) -> float:
        """The link's part of a slow step, from t = c + k/B at the two rates.

        t_slow - t_fast = k (1/B_slow - 1/B_fast), and the link's part of the slow step is
        k/B_slow = (t_slow - t_fast) / (1 - B_slow/B_fast): 1.25 (t_200 - t_1000), each t the
        mean step of the least disturbed run at that rate.
        """
        slow, fast = self.quietest_slow.mean_step_ns, self.quietest_fast.mean_step_ns
        return (slow - fast) / (1 - self.slow_mbit / self.fast_mbit)


def measure_link_cost(job: str, landing: Path, slow_mbit: float = 200, fast_mbit: float = 1000, repeats: int = 2,
                      steps: int = 8, extra_pairs: int = 3, ranks_per_host: int = 1) -> LinkCost:
    """Run `job` at the slow and the fast rate in turn, `repeats` times each, so that each rate
    gets runs in the machine's quiet spells and its busy ones alike; then, up to `extra_pairs` more
    times, while a rate's least disturbed run was not quiet (`LinkCost.quiet`)."""
    pairs: list[RatePair] = []
    while len(pairs) < repeats or (len(pairs) < repeats + extra_pairs and not LinkCost(slow_mbit, fast_mbit, tuple(pairs)).quiet):
        slow = run_job(job, slow_mbit, landing, steps=steps, ranks_per_host=ranks_per_host)
        pairs.append(RatePair(slow, run_job(job, fast_mbit, landing, steps=steps, ranks_per_host=ranks_per_host)))
    return LinkCost(slow_mbit, fast_mbit, tuple(pairs))
