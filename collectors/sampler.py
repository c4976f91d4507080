"""Sample the host's network byte counters and CPU use while a job runs (one sampler per host).

Every `interval_s` (100 ms by default, as in the paper) it reads `/proc/net/dev` (every interface,
loopback included: single-host jobs talk over it), the InfiniBand port data counters under
`/sys/class/infiniband` when present (RDMA traffic bypasses the kernel's socket counters), and the
per-core CPU time in `/proc/stat`. It appends raw cumulative counters to two CSV files in the run
folder; rates are derived later, in SQL. Reading three small kernel files costs microseconds, and the
sampler runs in the launcher's process, not in the training processes.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import TextIO

from collectors import host

SAMPLES = "samples"
NET_HEADER = "t_ns,host,interface,rx_bytes,tx_bytes\n"
CPU_HEADER = "t_ns,host,cpu,busy_ticks,idle_ticks\n"
PROC_NET_DEV = Path("/proc/net/dev")
PROC_STAT = Path("/proc/stat")


def safe_host(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "host"


def read_net(proc_net_dev: Path = PROC_NET_DEV, infiniband: Path = host.SYS_IB) -> list[tuple[str, int, int]]:
    """(interface, rx bytes, tx bytes) for every interface and InfiniBand port."""
    counters = []
    for line in proc_net_dev.read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        values = fields.split()
        if len(values) >= 9:
            counters.append((name.strip(), int(values[0]), int(values[8])))
    for port in sorted(infiniband.glob("*/ports/*")) if infiniband.is_dir() else []:
        try:
            # The port data counters count 4-byte words.
            rx = int((port / "counters" / "port_rcv_data").read_text()) * 4
            tx = int((port / "counters" / "port_xmit_data").read_text()) * 4
        except (OSError, ValueError):
            continue
        counters.append((f"ib:{port.parent.parent.name}/{port.name}", rx, tx))
    return counters


def core_ticks(proc_stat: Path = PROC_STAT) -> list[tuple[int, list[int]]]:
    """(core, [user, nice, system, idle, iowait, irq, softirq, steal] ticks) per core; core -1 is
    the whole machine."""
    cores = []
    for line in proc_stat.read_text().splitlines():
        if not line.startswith("cpu"):
            break
        name, *fields = line.split()
        cores.append((-1 if name == "cpu" else int(name[3:]), [int(v) for v in fields[:8]] + [0] * (8 - len(fields[:8]))))
    return cores


def read_cpu(proc_stat: Path = PROC_STAT) -> list[tuple[int, int, int]]:
    """(core, busy ticks, idle ticks) per core; core -1 is the whole machine."""
    cores = []
    for core, (user, nice, system, idle, iowait, irq, softirq, steal) in core_ticks(proc_stat):
        cores.append((core, user + nice + system + irq + softirq + steal, idle + iowait))
    return cores


class Sampler(threading.Thread):
    """A daemon thread appending counter samples to `<run>/samples/{net,cpu}.<host>.csv`."""

    def __init__(self, run_dir: Path, interval_s: float = 0.1):
        super().__init__(name="wirespeed-sampler", daemon=True)
        self.interval_s = interval_s
        folder = Path(run_dir) / SAMPLES
        folder.mkdir(parents=True, exist_ok=True)
        self.host = host.hostname()
        self.net_path = folder / f"net.{safe_host(self.host)}.csv"
        self.cpu_path = folder / f"cpu.{safe_host(self.host)}.csv"
        self.samples = 0
        self.failure: str | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            with open(self.net_path, "w") as net, open(self.cpu_path, "w") as cpu:
                net.write(NET_HEADER)
                cpu.write(CPU_HEADER)
                next_tick = time.monotonic()
                while True:
                    self._sample(net, cpu)
                    next_tick += self.interval_s
                    if self._stop_event.wait(max(0.0, next_tick - time.monotonic())):
                        self._sample(net, cpu)  # a last sample closes the final interval
                        return
        except OSError as failure:
            self.failure = str(failure)

    def _sample(self, net: TextIO, cpu: TextIO) -> None:
        now = time.time_ns()
        net.write("".join(f"{now},{self.host},{name},{rx},{tx}\n" for name, rx, tx in read_net()))
        cpu.write("".join(f"{now},{self.host},{core},{busy},{idle}\n" for core, busy, idle in read_cpu()))
        self.samples += 1
        if self.samples % 10 == 0:
            net.flush()
            cpu.flush()

    def stop(self) -> dict:
        """Stop sampling and say what was written, for the manifest."""
        self._stop_event.set()
        self.join(timeout=5)
        return {
            "interval_ms": self.interval_s * 1000,
            "samples": self.samples,
            "files": [str(p.relative_to(p.parent.parent)) for p in (self.net_path, self.cpu_path)],
            "failure": self.failure,
        }
