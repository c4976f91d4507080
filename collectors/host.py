"""What a host can tell about itself: name, CPU, and the line rate of its network link.

The link rate matters most: utilisation and the what-if analysis compare against it. It is read
from the OS (InfiniBand port rates, then the Ethernet speed of the interface the job uses), can be
overridden, and always comes with where it came from, so that an unknown rate stays unknown
instead of becoming a guess.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

SYS_NET = Path("/sys/class/net")
SYS_IB = Path("/sys/class/infiniband")
PROC_ROUTE = Path("/proc/net/route")


def hostname() -> str:
    return socket.gethostname()


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def link_rate(override_gbps: float | None = None, backend: str | None = None) -> tuple[float | None, str | None, str | None]:
    """(Gbit/s, source, interface) of the host's link to the other hosts.

    The interface is named as the sampler names it (`eth0`, `ib:mlx5_0/1`), so that its counters
    can be compared with the rate. Rate and source are None when unknown.
    """
    if override_gbps is None and os.environ.get("WIRESPEED_LINK_GBPS"):
        override_gbps = float(os.environ["WIRESPEED_LINK_GBPS"])
    if override_gbps is not None:
        return float(override_gbps), "override", job_interface()
    if backend != "gloo":
        port = infiniband_rate()
        if port is not None:
            gbps, device_port = port
            return gbps, f"infiniband:{device_port}", f"ib:{device_port}"
    interface = job_interface()
    if interface is not None:
        speed = ethernet_speed_gbps(interface)
        if speed is not None:
            return speed, f"sysfs:{interface}", interface
    return None, None, interface


def intra_link_rate() -> tuple[float | None, str | None]:
    """The rate of links between ranks of one host (NVLink, shared memory): only as given."""
    value = os.environ.get("WIRESPEED_INTRA_LINK_GBPS")
    return (float(value), "override") if value else (None, None)


def infiniband_rate() -> tuple[float, str] | None:
    """(Gbit/s, "<device>/<port>") of the fastest active InfiniBand/RoCE port, as NCCL would use it."""
    best: tuple[float, str] | None = None
    if not SYS_IB.is_dir():
        return None
    for port in sorted(SYS_IB.glob("*/ports/*")):
        try:
            state = (port / "state").read_text()
            rate = (port / "rate").read_text()
        except OSError:
            continue
        match = re.match(r"\s*([\d.]+)\s*Gb/sec", rate)
        if "ACTIVE" not in state or not match:
            continue
        gbps = float(match.group(1))
        if best is None or gbps > best[0]:
            best = (gbps, f"{port.parent.parent.name}/{port.name}")
    return best


def job_interface() -> str | None:
    """The interface the job's sockets use: as configured for NCCL/gloo, else the default route's."""
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = os.environ.get(variable, "")
        names = [n for n in value.split(",") if n and not n.startswith("^") and not n.startswith("=")]
        if names and (SYS_NET / names[0]).exists():
            return names[0]
    try:
        for line in PROC_ROUTE.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 1 and fields[1] == "00000000":
                return fields[0]
    except OSError:
        return None
    return None


def ethernet_speed_gbps(interface: str) -> float | None:
    """/sys/class/net/<if>/speed is in Mbit/s; virtual interfaces report -1 or refuse to answer."""
    try:
        mbps = int((SYS_NET / interface / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return mbps / 1000 if mbps > 0 else None
