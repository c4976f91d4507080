"""Shared fixtures: the real traces in ../shared, a warehouse holding all of them, a live gloo capture."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import stages
from pipelines.read.sources import run_id_for
from pipelines.settings import Settings
from pipelines.warehouse.store import Warehouse

# Modules whose jobs run on the emulated cluster, their timings judged, or that bring up the
# deployment: `make test` runs them one at a time, once the rest (in parallel) are done.
ALONE = {"test_cluster", "test_cluster_exposure", "test_cluster_matrix", "test_compare", "test_job_traces",
         "test_replay", "test_deployment"}

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
TRACES = SHARED / "traces"
REFERENCE = TRACES / "reference_outputs"


def shared_trace_files() -> list[Path]:
    assert TRACES.is_dir(), f"the shared traces must be beside the clone, at {TRACES}"
    return sorted(TRACES.glob("*/*.json.gz"))


def ingest_directly(
    store: Warehouse,
    path: Path,
    run_id: str | None = None,
    key: str = "test",
    settings: Settings | None = None,
    overrides: dict | None = None,
) -> str:
    """Both stages of an ingest, as the Dagster assets and `wirespeed ingest` run them, without the report."""
    run_id = run_id or run_id_for(path)
    settings = settings or Settings()
    store.register_source(run_id, path, overrides)
    stages.parse(store, settings, path.parent, run_id, key, None, publish=False)
    stages.analyze(store, settings, run_id, key)
    return run_id


@pytest.fixture(scope="session")
def shared_warehouse(tmp_path_factory) -> Warehouse:
    """Every shared trace file as its own run, and the two-rank HTA folder as one run."""
    store = Warehouse(tmp_path_factory.mktemp("shared") / "warehouse")
    store.ensure()
    for path in shared_trace_files():
        ingest_directly(store, path)
    ingest_directly(store, TRACES / "hta_sampled_2rank", "sampled_2rank")
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory, request) -> Warehouse:
    """An empty warehouse for one test module's runs."""
    store = Warehouse(tmp_path_factory.mktemp(request.module.__name__.removeprefix("test_")) / "warehouse")
    store.ensure()
    return store


def table_rows(store: Warehouse, query: str, parameters: list | dict | None = None) -> list[dict]:
    """A query's rows over a warehouse's published runs, each as a dict by column name."""
    con = store.connect()
    try:
        result = con.execute(query, parameters or [])
        columns = [column[0] for column in result.description]
        return [dict(zip(columns, row, strict=True)) for row in result.fetchall()]
    finally:
        con.close()


def wirespeed(*args: str, cwd: Path | None = None, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the real `wirespeed` command line in a child process."""
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.commands.cli", *args], cwd=cwd or REPO, env=env, capture_output=True, text=True
    )
    if check and result.returncode != 0:
        raise AssertionError(f"wirespeed {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def demo_answers(result) -> list[str]:
    """The demo's per-run lines, after checking it printed nothing but progress bars before them."""
    runs = [line for line in result.stdout.splitlines() if not line.startswith("note: ")]
    assert len(runs) == 2, result.stdout
    for line in runs:  # the whole answer: a verdict against a known line rate, the utilisation, the what-if
        assert "line rate unknown" not in line and "Gbit/s line rate" in line and "at full line rate" in line, line
    shown = [line for line in result.stderr.replace("\r", "\n").splitlines() if line.strip()]
    assert all(line.startswith(("capture ", "ingest: ", "wirespeed ingest: ")) for line in shown), shown
    return runs


GLOO_RANKS = 4


@pytest.fixture(scope="session")
def gloo_run(tmp_path_factory) -> Path:
    """A live capture: `wirespeed collect` around a 4-rank DDP job over gloo (real torch processes).

    The ranks talk over loopback (GLOO_SOCKET_IFNAME=lo), so the sampled `lo` counters carry exactly
    the collectives' traffic; the line rates are given, as a user of a virtual NIC would.
    """
    landing = tmp_path_factory.mktemp("landing")
    wirespeed(
        "collect", "--landing", str(landing), "--run-id", "gloo-live", "--job", "test-job",
        "--link-gbps", "25", "--intra-link-gbps", "40",
        "--", sys.executable, "-m", "collectors.demo_ddp", "--world-size", str(GLOO_RANKS), "--steps", "6",
        env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"},
    )
    return landing / "gloo-live"


def require_cluster() -> None:
    """Skip (or, with WIRESPEED_REQUIRE_CLUSTER set, fail) where no emulated cluster can be built."""
    from pipelines.testbed.cluster import unavailable_reason

    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("WIRESPEED_REQUIRE_CLUSTER"):
        pytest.fail(f"the emulated cluster is required here (WIRESPEED_REQUIRE_CLUSTER is set) but {reason}")
    pytest.skip(f"no emulated cluster: {reason}")


CLUSTER_SLOW_MBIT = 200
CLUSTER_FAST_MBIT = 1000
CLUSTER_REPEATS = 3  # pairs of runs (slow, then fast); the checks take the median pair


@pytest.fixture(scope="session")
def cluster_runs(tmp_path_factory):
    """`cluster_runs(job, ranks_per_host=1, repeats=CLUSTER_REPEATS, rates_mbit=(200, 1000)) -> LinkCost`:
    a `collectors.jobs` job on two emulated hosts at the slow and the fast rate, `repeats` times
    each in turn (`pipelines.testbed.cluster.measure_link_cost`), once per session."""
    from pipelines.testbed.cluster import measure_link_cost

    landing = tmp_path_factory.mktemp("cluster-landing")
    measured: dict[tuple, object] = {}

    def runs_of(job: str, ranks_per_host: int = 1, repeats: int = CLUSTER_REPEATS,
                rates_mbit: tuple[float, float] = (CLUSTER_SLOW_MBIT, CLUSTER_FAST_MBIT)):
        require_cluster()
        key = (job, ranks_per_host, rates_mbit)
        if key not in measured:
            measured[key] = measure_link_cost(job, landing, *rates_mbit, repeats, ranks_per_host=ranks_per_host)
        return measured[key]

    return runs_of


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module.__name__ in ALONE:
            item.add_marker(pytest.mark.alone)
