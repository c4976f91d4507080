"""The emulated cluster (real namespaces, veths, a bridge and tbf) and multi-host `wirespeed collect` on it."""

from __future__ import annotations

import csv
import ipaddress
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from collectors import rundir
from collectors.launch import _last_to_finish, collect
from conftest import CLUSTER_FAST_MBIT, CLUSTER_REPEATS, CLUSTER_SLOW_MBIT, REPO, demo_answers, require_cluster, wirespeed
from pipelines.testbed.cluster import INTERFACE, QUIET_STEAL_SHARE, Cluster, ClusterJobRun, LinkCost, RatePair

BENCHMARK_RANGE = ipaddress.ip_network("198.18.0.0/15")
PORT = 5201

# Receives until the sender closes, prints the byte count; then lingers for argv[1] seconds.
RECEIVER = """
import socket, sys, time
server = socket.create_server(("0.0.0.0", 5201))
connection, _ = server.accept()
received = 0
while chunk := connection.recv(1 << 20):
    received += len(chunk)
connection.close()
print(received, flush=True)
time.sleep(float(sys.argv[1]))
"""

# Sends for argv[2] seconds (or argv[3] bytes, whichever ends first) to argv[1]; prints Mbit/s.
SENDER = """
import socket, sys, time
for attempt in range(100):
    try:
        connection = socket.create_connection((sys.argv[1], 5201))
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
chunk, sent = b"x" * (1 << 16), 0
started = time.perf_counter()
while time.perf_counter() - started < float(sys.argv[2]) and sent < int(sys.argv[3]):
    connection.sendall(chunk)
    sent += len(chunk)
connection.shutdown(socket.SHUT_WR)
connection.recv(1)  # the receiver has read everything once it closes
print(sent * 8 / (time.perf_counter() - started) / 1e6)
"""

# Echoes a byte for each 1 MB it reads, 30 times.
ECHO = """
import socket
listener = socket.create_server(("0.0.0.0", 5201))
connection, _ = listener.accept()
for _ in range(30):
    left = 1 << 20
    while left:
        left -= len(connection.recv(left))
    connection.sendall(b"k")
"""

# Sends 1 MB to argv[1] after 30 ms of idle link, 30 times; prints the median ms until each was read.
BURSTS = """
import socket, statistics, time
for attempt in range(100):
    try:
        connection = socket.create_connection((__import__("sys").argv[1], 5201))
        break
    except ConnectionRefusedError:
        time.sleep(0.05)
took = []
for _ in range(30):
    time.sleep(0.03)
    started = time.perf_counter()
    connection.sendall(b"x" * (1 << 20))
    connection.recv(1)
    took.append((time.perf_counter() - started) * 1e3)
print(statistics.median(took))
"""


@pytest.fixture
def needs_cluster():
    require_cluster()


def namespaces_now() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def links_now() -> set[str]:
    listed = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip() for line in listed.splitlines()}


def transfer_mbit(cluster: Cluster, sender: int, receiver: int, seconds: float) -> float:
    server = cluster.popen(receiver, [sys.executable, "-c", RECEIVER, "0"], stdout=subprocess.PIPE, text=True)
    sent = cluster.run(sender, [sys.executable, "-c", SENDER, cluster.hosts[receiver].address, str(seconds), str(10**12)], timeout=60)
    server.wait(timeout=30)
    assert sent.returncode == 0, sent.stderr
    return float(sent.stdout)


def test_each_rate_is_judged_on_its_quiet_runs_or_else_on_its_least_disturbed_one():
    """Runs that lost more than QUIET_STEAL_SHARE of the CPUs are left out where their rate has a
    quiet one; where none is quiet, the one with the shortest mean step stands for its rate."""
    def run(name: str, step_ms: float, steal: float) -> ClusterJobRun:
        return ClusterJobRun(Path(name), {0: [int(step_ms * 1e6)] * 8}, 0, steal)

    quiet, loud = QUIET_STEAL_SHARE / 2, QUIET_STEAL_SHARE * 2
    cost = LinkCost(200, 1000, (RatePair(run("s1", 400, loud), run("f1", 120, quiet)),
                                RatePair(run("s2", 360, loud), run("f2", 110, loud)),
                                RatePair(run("s3", 380, loud), run("f3", 130, quiet))))
    slows, fasts = cost.judged()
    assert [r.run_dir.name for r in slows] == ["s2"] and [r.run_dir.name for r in fasts] == ["f1", "f3"]


@pytest.mark.usefixtures("needs_cluster")
def test_hosts_have_their_own_names_addresses_and_shaped_links():
    with Cluster(hosts=3, link_mbit=CLUSTER_SLOW_MBIT) as cluster:
        names = [cluster.run(i, ["hostname"]).stdout.strip() for i in range(3)]
        assert names == [h.name for h in cluster.hosts] and len(set(names)) == 3
        assert subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() not in names
        for host in cluster.hosts:
            shown = cluster.run(host.index, ["ip", "-4", "-o", "addr", "show", INTERFACE]).stdout.split()
            address = ipaddress.ip_interface(shown[shown.index("inet") + 1])
            assert str(address.ip) == host.address and address.ip in BENCHMARK_RANGE
            assert "tbf" in cluster.run(host.index, ["tc", "qdisc", "show", "dev", INTERFACE]).stdout
            switch_side = subprocess.run(["tc", "-n", cluster.switch_namespace, "qdisc", "show", "dev", f"p{host.index}"],
                                         capture_output=True, text=True, check=True).stdout
            assert "tbf" in switch_side and "rate 200Mbit" in switch_side


@pytest.mark.usefixtures("needs_cluster")
def test_the_set_rate_is_achieved_in_both_directions():
    """TCP's goodput over a tbf-shaped link is the rate less headers (about 4 % at MTU 1500)."""
    with Cluster(hosts=2, link_mbit=CLUSTER_SLOW_MBIT) as cluster:
        there = transfer_mbit(cluster, 0, 1, seconds=2)
        back = transfer_mbit(cluster, 1, 0, seconds=2)
    for achieved in (there, back):
        assert abs(achieved / CLUSTER_SLOW_MBIT - 1) < 0.15, (there, back)


@pytest.mark.usefixtures("needs_cluster")
def test_a_send_after_an_idle_link_goes_no_faster_than_the_line_rate():
    """A NIC serialises at its line rate however long it was idle: a full token bucket drained at
    once let 1 MB arrive in 33 ms at 200 Mbit/s, where its bits take 42."""
    with Cluster(hosts=2, link_mbit=CLUSTER_SLOW_MBIT) as cluster:
        echo = cluster.popen(1, [sys.executable, "-c", ECHO])
        sent = cluster.run(0, [sys.executable, "-c", BURSTS, cluster.hosts[1].address], timeout=60)
        echo.wait(timeout=30)
    assert sent.returncode == 0, sent.stderr
    bits_ms = 8 * (1 << 20) / (CLUSTER_SLOW_MBIT * 1e6) * 1e3
    assert float(sent.stdout) >= 0.9 * bits_ms, (sent.stdout, bits_ms)


@pytest.mark.usefixtures("needs_cluster")
def test_everything_is_gone_after_the_context_even_after_an_exception():
    links_before, namespaces_before = links_now(), namespaces_now()
    with pytest.raises(RuntimeError, match="inside the cluster"):
        with Cluster(hosts=2, link_mbit=100) as cluster:
            lingering = cluster.popen(1, ["sleep", "300"])
            assert set(cluster.namespaces()) <= namespaces_now()
            raise RuntimeError("inside the cluster")
    assert lingering.poll() is not None
    assert not set(cluster.namespaces()) & namespaces_now()
    assert namespaces_now() == namespaces_before and links_now() == links_before


def collect_on(cluster: Cluster, index: int, landing: Path, run_id: str, command: list[str]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(landing), "--run-id", run_id, "--nnodes", "2",
            "--link-gbps", str(CLUSTER_SLOW_MBIT / 1000), "--", *command]
    return cluster.popen(index, argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def eth0_bytes(samples: Path) -> tuple[int, int, float]:
    """(received, sent, fastest 100 ms-window Mbit/s either way) of eth0 over a sampled run."""
    rows = [r for r in csv.DictReader(samples.open()) if r["interface"] == INTERFACE]
    fastest = 0.0
    for before, after in zip(rows, rows[1:]):
        seconds = (int(after["t_ns"]) - int(before["t_ns"])) / 1e9
        moved = max(int(after[k]) - int(before[k]) for k in ("rx_bytes", "tx_bytes"))
        fastest = max(fastest, moved * 8 / seconds / 1e6)
    return (int(rows[-1]["rx_bytes"]) - int(rows[0]["rx_bytes"]), int(rows[-1]["tx_bytes"]) - int(rows[0]["tx_bytes"]), fastest)


@pytest.mark.usefixtures("needs_cluster")
def test_multi_host_collect_finishes_only_with_its_last_host(tmp_path):
    """host0 sends 8 MB and exits; host1 receives it, then runs 4 s longer. Only then is the run done."""
    payload_bytes = 8 * 10**6
    with Cluster(hosts=2, link_mbit=CLUSTER_SLOW_MBIT) as cluster:
        slow = collect_on(cluster, 1, tmp_path, "two-hosts", [sys.executable, "-c", RECEIVER, "4"])
        fast = collect_on(cluster, 0, tmp_path, "two-hosts", [sys.executable, "-c", SENDER, cluster.hosts[1].address, "30", str(payload_bytes)])
        assert fast.wait(timeout=60) == 0, fast.communicate()
        run_dir = tmp_path / "two-hosts"
        assert slow.poll() is None, "host1 should still be running"
        assert (run_dir / "hosts" / "host0.json").is_file()
        assert not (run_dir / rundir.DONE).exists() and not (run_dir / rundir.MANIFEST).exists()
        stdout, stderr = slow.communicate(timeout=60)
        assert slow.returncode == 0, stderr
    assert (run_dir / rundir.DONE).is_file()
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    assert manifest["hosts"] == ["host0", "host1"] and manifest["nnodes"] == 2 and manifest["exit_code"] == 0
    launches = {launch["launcher_host"]: launch for launch in manifest["launches"]}
    assert sorted(launches) == ["host0", "host1"] and all(launch["exit_code"] == 0 for launch in launches.values())
    assert launches["host0"]["ended_ns"] < launches["host1"]["ended_ns"] - 3 * 10**9
    assert manifest["started_ns"] == min(l["started_ns"] for l in launches.values())
    assert manifest["ended_ns"] == launches["host1"]["ended_ns"]
    assert sorted(s["host"] for s in manifest["sampling"]) == ["host0", "host1"]
    received_on_1 = eth0_bytes(run_dir / "samples" / "net.host1.csv")
    sent_on_0 = eth0_bytes(run_dir / "samples" / "net.host0.csv")
    assert sent_on_0[1] >= payload_bytes and received_on_1[0] >= payload_bytes
    # Each host's own counters, at (not above) the shaped rate.
    for fastest_mbit in (sent_on_0[2], received_on_1[2]):
        assert 0.6 * CLUSTER_SLOW_MBIT < fastest_mbit < 1.15 * CLUSTER_SLOW_MBIT, (sent_on_0, received_on_1)


@pytest.mark.usefixtures("needs_cluster")
def test_hosts_finishing_together_write_the_manifest_once(tmp_path):
    """Two hosts whose commands end at the same moment: exactly one of them finishes the run."""
    with Cluster(hosts=2, link_mbit=CLUSTER_FAST_MBIT) as cluster:
        for attempt in range(3):
            run_id = f"together-{attempt}"
            launchers = [collect_on(cluster, i, tmp_path, run_id, ["true"]) for i in range(2)]
            assert [launcher.wait(timeout=60) for launcher in launchers] == [0, 0]
            manifest = json.loads((tmp_path / run_id / rundir.MANIFEST).read_text())
            assert manifest["hosts"] == ["host0", "host1"] and len(manifest["launches"]) == 2
            assert (tmp_path / run_id / rundir.DONE).is_file()


def test_exactly_one_finisher_claims_the_run(tmp_path):
    (tmp_path / rundir.HOSTS).mkdir()
    for name in ("a", "b"):
        rundir.write_json_atomically(tmp_path / rundir.HOSTS / f"{name}.json", {})
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(_last_to_finish(tmp_path, 2))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [False] * 7 + [True]


def test_multi_host_collect_needs_a_shared_run_id_and_one_launch_per_host(tmp_path):
    with pytest.raises(ValueError, match="same --run-id"):
        collect(tmp_path, ["true"], nnodes=2)
    collect(tmp_path, ["true"], "shared", nnodes=2, sample_interval_ms=0)
    assert not (tmp_path / "shared" / rundir.DONE).exists()
    with pytest.raises(FileExistsError, match="this host"):
        collect(tmp_path, ["true"], "shared", nnodes=2, sample_interval_ms=0)


@pytest.mark.parametrize("job", ["ddp", "fsdp", "tp", "pp", "ep"])
def test_every_job_runs_on_two_hosts_and_is_slower_on_a_slower_link(cluster_runs, job):
    cost = cluster_runs(job)
    runs = [(run, rate / 1000) for pair in cost.pairs for run, rate in ((pair.slow, CLUSTER_SLOW_MBIT), (pair.fast, CLUSTER_FAST_MBIT))]
    assert len(runs) >= 2 * CLUSTER_REPEATS  # more pairs while the machine was not quiet (measure_link_cost)
    for run, link_gbps in runs:
        manifest = json.loads((run.run_dir / rundir.MANIFEST).read_text())
        assert manifest["hosts"] == ["host0", "host1"] and manifest["world_size"] == 2 and manifest["exit_code"] == 0
        assert manifest["link_gbps"] == link_gbps and manifest["link_interface"] == INTERFACE
        assert sorted(p.name for p in (run.run_dir / "traces").iterdir()) == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
        assert sorted(run.step_ns) == [0, 1] and all(len(times) == 8 for times in run.step_ns.values())
    # Each job is communication-bound at 200 Mbit/s (on an idle machine 1 Gbit/s takes 55-80 % off
    # its step); other work on the CPUs shrinks that, but a five times faster link must still show.
    steps = [(pair.slow.median_step_ns, pair.fast.median_step_ns) for pair in cost.pairs]
    assert all(fast < slow for slow, fast in steps), steps


def test_cluster_demo_says_why_it_cannot_run(tmp_path):
    """Without `ip` and `tc` on the PATH (or without root), the demo stops before capturing anything."""
    (tmp_path / "empty").mkdir()
    result = wirespeed("demo", "--cluster", "--landing", str(tmp_path / "landing"), "--warehouse", str(tmp_path / "warehouse"),
                       env={**os.environ, "PATH": str(tmp_path / "empty")}, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot emulate a cluster" in result.stderr and ("`ip` is not installed" in result.stderr or "needs root" in result.stderr)
    assert not (tmp_path / "landing").exists()


@pytest.mark.usefixtures("needs_cluster")
def test_the_demo_runs_on_the_cluster_when_it_can_and_answers_whole(tmp_path):
    result = wirespeed("demo", "--landing", str(tmp_path / "landing"), "--warehouse", str(tmp_path / "warehouse"))
    cluster_run, example = demo_answers(result)
    run_dir = next(p for p in (tmp_path / "landing").iterdir() if p.name.startswith("demo-cluster-"))
    assert cluster_run.startswith(f"{run_dir.name}: ") and "of the 1 Gbit/s line rate" in cluster_run
    assert example.startswith("demo-a100-") and "of the 200 Gbit/s line rate" in example
    assert "was assumed" in result.stdout
    manifest = json.loads((run_dir / rundir.MANIFEST).read_text())
    assert manifest["hosts"] == ["host0", "host1"] and manifest["link_gbps"] == 1.0 and manifest["link_source"] == "override"
