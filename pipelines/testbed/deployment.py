"""The deployment of deploy/ brought up on the emulated cluster, with real servers: PostgreSQL and
Redis on a head host with the Dagster daemon, a Celery worker on each other host, all sharing one
folder for the warehouse, the landing folder and Dagster's step outputs.

`wirespeed scale-demo` (make scale-demo) lands a 16-rank run with one worker, another with two, then
a burst of small runs, and prints what it saw as one JSON object: the hosts that parsed shards,
whether the tables equal an in-process ingest's, how many runs were ingested (each once), and the
16-rank run's seconds with one worker and with two.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.testbed.cluster import REPO, Cluster, unavailable_reason

DEPLOY = REPO / "deploy"
HEAD = 0  # the host of PostgreSQL, Redis and the daemon; the others are workers
PG_PORT = 5432
REDIS_PORT = 6379
REDIS_PASSWORD = "wirespeed"  # Redis refuses other hosts without one
BIN = Path(sys.executable).parent
EXAMPLE = REPO / "examples" / "nccl_data.json.gz"
RANK_BYTES = 9_600_000  # a copy of the example trace's events per rank
SHARD_MB = 40  # four rank files a shard
SENSOR_INTERVAL_S = 5  # the demo's runs land one phase after another; each waits for a look
INGEST_JOBS = ("ingest_job", "ingest_batch_job")  # not the roll-ups' hourly schedule, which may fall in a demo


def missing() -> str | None:
    """Why the deployment cannot be brought up here (None when it can)."""
    reason = unavailable_reason()
    if reason:
        return reason
    for tool in ("initdb", "postgres", "redis-server"):
        if not _postgres_tool(tool).exists() and shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install postgresql redis-server)"
    try:
        import dagster_celery  # noqa: F401
        import dagster_postgres  # noqa: F401
    except ImportError as absent:
        return f"{absent.name} is not installed (pip install -e '.[scale]')"
    return None


def _postgres_tool(name: str) -> Path:
    """PostgreSQL's server programs live outside PATH in Debian's packages."""
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return found[-1] if found else Path(shutil.which(name) or name)


@dataclass
class Deployment:
    """Servers, daemon and workers started on `cluster` over the shared folder `root`."""

    cluster: Cluster
    root: Path

    def __post_init__(self) -> None:
        head = self.cluster.hosts[HEAD].address
        self.home, self.landing, self.warehouse = self.root / "dagster_home", self.root / "landing", self.root / "warehouse"
        for folder in (self.home, self.landing, self.warehouse, self.root / "shared", self.root / "logs"):
            folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEPLOY / "dagster.yaml", self.home / "dagster.yaml")
        (self.warehouse / "wirespeed.toml").write_text(f"[resources]\nshard_mb = {SHARD_MB}\nthreads = 2\n")
        self.env = {
            **os.environ,
            "DAGSTER_HOME": str(self.home), "WIRESPEED_HOME": str(self.warehouse), "WIRESPEED_LANDING": str(self.landing),
            "WIRESPEED_EXECUTOR": "celery", "WIRESPEED_DAGSTER_SHARED": str(self.root / "shared"),
            "WIRESPEED_SENSOR_INTERVAL_S": str(SENSOR_INTERVAL_S),
            "WIRESPEED_PG_HOST": head, "WIRESPEED_PG_PORT": str(PG_PORT), "WIRESPEED_PG_USER": "postgres",
            "WIRESPEED_PG_PASSWORD": "wirespeed", "WIRESPEED_PG_DB": "dagster",
            "WIRESPEED_CELERY_BROKER": f"redis://:{REDIS_PASSWORD}@{head}:{REDIS_PORT}/0",
            "WIRESPEED_CELERY_BACKEND": f"redis://:{REDIS_PASSWORD}@{head}:{REDIS_PORT}/1",
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        }
        self.servers: list[subprocess.Popen] = []
        self.workers: dict[int, subprocess.Popen] = {}
        self.logs: list = []  # each process's log file, closed by `stop`

    # --- bringing it up ---------------------------------------------------------------------------

    def start_servers(self) -> None:
        """PostgreSQL (as its own user, in a fresh data directory) and Redis on the head host,
        then the instance's tables, then the daemon."""
        data = self.root / "postgres"
        data.mkdir()
        shutil.chown(data, "postgres", "postgres")
        _check(subprocess.run(["runuser", "-u", "postgres", "--", str(_postgres_tool("initdb")), "-D", str(data),
                               "-U", "postgres", "--auth=trust", "--no-sync"], capture_output=True, text=True))
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 198.18.0.0/15 trust\n")
        head = self.cluster.hosts[HEAD].address
        self.servers.append(self._start(HEAD, "postgres", [
            "runuser", "-u", "postgres", "--", str(_postgres_tool("postgres")), "-D", str(data),
            "-c", f"listen_addresses={head}", "-p", str(PG_PORT), "-k", str(data), "-c", "fsync=off",
        ]))
        self.servers.append(self._start(HEAD, "redis", [
            "redis-server", "--bind", head, "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no",
            "--requirepass", REDIS_PASSWORD,
        ]))
        _wait(lambda: self.cluster.run(HEAD, [str(_postgres_tool("pg_isready")), "-h", head, "-p", str(PG_PORT), "-U", "postgres"]).returncode == 0,
              "PostgreSQL to accept connections", 60)
        _check(self.cluster.run(HEAD, ["psql", "-h", head, "-U", "postgres", "-c", "CREATE DATABASE dagster"], env=self.env))
        # The instance's tables made once, before several processes would make them at once.
        _check(self.cluster.run(HEAD, [str(BIN / "python"), "-c", "import dagster as dg; dg.DagsterInstance.get().get_run_records(limit=1)"],
                                env=self.env))
        self.set_pool(1)
        self.servers.append(self._start(HEAD, "daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")]))

    def start_worker(self, index: int) -> None:
        """A Celery worker on host `index`, one step at a time (a step uses every core), in its
        main process (`solo`: a batch's runs are ingested by processes of its own)."""
        self.workers[index] = self._start(index, f"worker{index}", [
            str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y", str(DEPLOY / "celery.yaml"),
            "-n", f"wirespeed-{index}", "--", "--pool", "solo",
        ])
        self.set_pool(len(self.workers))
        _wait(lambda: f"wirespeed-{index}@" in self._celery_status(), f"the worker on host {index}", 120)

    def set_pool(self, slots: int) -> None:
        """The `wirespeed_ingest` pool: as many slots as there are workers."""
        _check(self.cluster.run(HEAD, [str(BIN / "dagster"), "instance", "concurrency", "set", "wirespeed_ingest", str(slots)],
                                env=self.env))

    def _celery_status(self) -> str:
        result = self.cluster.run(HEAD, [str(BIN / "celery"), "-A", "dagster_celery.app", "-b",
                                         self.env["WIRESPEED_CELERY_BROKER"], "inspect", "ping"], env=self.env, timeout=60)
        return result.stdout

    def _start(self, index: int, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.root / "logs" / f"{name}.log", "w")
        self.logs.append(log)
        return self.cluster.popen(index, argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)

    def stop(self) -> None:
        """Workers and daemon first, then the servers, each asked to stop before it is killed."""
        for child in [*self.workers.values(), *reversed(self.servers)]:
            if child.poll() is None:
                try:
                    os.killpg(child.pid, signal.SIGINT)  # PostgreSQL's fast shutdown; the others' Ctrl-C
                    child.wait(timeout=30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        for log in self.logs:
            log.close()

    # --- runs ------------------------------------------------------------------------------------

    def land(self, run_ids: list[str], ranks: int | None = None) -> None:
        """Finished run folders in the landing folder, each of `ranks` generated rank files (generated
        once, linked into each) or else the example trace; all written first, then moved in at once,
        so one sensor tick sees them all."""
        from pipelines.testbed.bench import synth

        staged, generated = self.root / "staged", self.root / f"generated-{ranks}"
        if ranks and not generated.exists():
            synth.generate(EXAMPLE, generated, ranks=ranks, bytes_per_rank=RANK_BYTES)
        for run_id in run_ids:
            traces = staged / run_id / "traces"
            if ranks:
                shutil.copytree(generated, traces, copy_function=os.link)
            else:
                traces.mkdir(parents=True)
                shutil.copy(EXAMPLE, traces / EXAMPLE.name)
            (staged / run_id / "manifest.json").write_text(json.dumps({"run_id": run_id, "job": "scale-demo"}))
            (staged / run_id / "_DONE").touch()
        for run_id in run_ids:
            (staged / run_id).rename(self.landing / run_id)

    def wait_for(self, run_ids: list[str], timeout: float) -> dict:
        """Until every run's report is materialised and no Dagster run is left to finish; returns
        the instance's state then (see `status`)."""
        from pipelines.warehouse.store import Warehouse

        state: dict = {}
        store = Warehouse(self.warehouse)
        reports = [store.report_path(run_id) for run_id in run_ids]
        looked = [time.time()]

        def done() -> bool:
            # A look at the instance starts a Python that competes with the workers: look when the
            # reports are written, or every 15 s for a failed run.
            if not all(report.exists() for report in reports) and time.time() - looked[0] < 15:
                return False
            looked[0] = time.time()
            state.update(self.status(run_ids))
            if state["failed"]:
                raise RuntimeError(f"Dagster runs {state['failed']} failed; see {self.root / 'logs'}")
            return set(run_ids) <= set(state["reported"]) and not state["busy"]

        _wait(done, f"{len(run_ids)} runs to be ingested", timeout)
        return state

    def status(self, run_ids: list[str]) -> dict:
        """`status` asked on the head host: only the cluster's hosts reach PostgreSQL."""
        result = self.cluster.run(HEAD, [str(BIN / "python"), "-m", "pipelines.testbed.deployment", "status", *run_ids],
                                  env=self.env, cwd=REPO, timeout=120)
        _check(result)
        return json.loads(result.stdout)


def status(run_ids: list[str]) -> dict:
    """The instance at $DAGSTER_HOME: the runs whose reports are materialised; of the ingest jobs'
    Dagster runs, those not finished yet and those that failed, each ingest_job run's seconds by
    partition, each run's steps, the most under way at once; and how many times each of `run_ids`
    had its trace_events materialised."""
    import dagster as dg

    instance = dg.DagsterInstance.get()
    try:
        unfinished = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                      dg.DagsterRunStatus.STARTED]
        records = [r for r in instance.get_run_records() if r.dagster_run.job_name in INGEST_JOBS]
        materialized = {
            run_id: len(instance.fetch_materializations(
                dg.AssetRecordsFilter(dg.AssetKey("trace_events"), asset_partitions=[run_id]), limit=10).records)
            for run_id in run_ids
        }
        return {
            "reported": sorted(instance.get_materialized_partitions(dg.AssetKey("run_report"))),
            "busy": sum(1 for r in records if r.dagster_run.status in unfinished),
            "failed": [r.dagster_run.run_id for r in records if r.dagster_run.status == dg.DagsterRunStatus.FAILURE],
            "seconds": {r.dagster_run.tags.get("dagster/partition"): r.end_time - r.start_time for r in records
                        if r.dagster_run.job_name == "ingest_job" and r.end_time and r.start_time},
            "steps": {r.dagster_run.tags.get("dagster/partition") or r.dagster_run.run_id: _steps(instance, r.dagster_run.run_id)
                      for r in records},
            "most_runs_at_once": _most_at_once([(r.start_time, r.end_time) for r in records if r.start_time and r.end_time]),
            "materialized": materialized,
            "dagster_runs": len(records),
        }
    finally:
        instance.dispose()


def _steps(instance, run_id: str) -> dict[str, list]:
    """Each step of a Dagster run: [seconds, the Celery worker that ran it]."""
    from dagster import DagsterEventType

    steps: dict[str, list] = {}
    for entry in instance.all_logs(run_id, of_type={DagsterEventType.STEP_SUCCESS, DagsterEventType.ENGINE_EVENT}):
        event = entry.dagster_event
        step = steps.setdefault(event.step_key, [None, None]) if event.step_key else None
        if step is None:
            continue
        if event.event_type == DagsterEventType.STEP_SUCCESS:
            step[0] = round(event.event_specific_data.duration_ms / 1000, 2)
        elif "Celery worker" in (event.event_specific_data.metadata or {}):
            step[1] = event.event_specific_data.metadata["Celery worker"].value
    return {key: value for key, value in steps.items() if value[0] is not None}


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most spans (start, end) under way at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, change in edges:
        running += change
        most = max(most, running)
    return most


def scale_demo(small_runs: int = 20, ranks: int = 16, timeout: float = 900) -> dict:
    """Bring the deployment up on three hosts, ingest through it, check what it wrote; stop it all."""
    from pipelines.warehouse.store import TABLES, Warehouse, tables_differ

    root = Path(tempfile.mkdtemp(prefix="wirespeed-scale-"))
    root.chmod(0o755)  # PostgreSQL runs as its own user, inside it
    one, two = f"ranks{ranks}-one-worker", f"ranks{ranks}-two-workers"
    burst = [f"small-{index:02d}" for index in range(small_runs)]
    try:
        with Cluster(hosts=3, link_mbit=10_000) as cluster:
            deployment = Deployment(cluster, root)
            try:
                deployment.start_servers()
                deployment.start_worker(1)
                deployment.land([one], ranks)
                deployment.wait_for([one], timeout)
                deployment.start_worker(2)
                deployment.land([two], ranks)
                deployment.wait_for([two], timeout)
                deployment.land(burst)
                state = deployment.wait_for([one, two, *burst], timeout)
            finally:
                deployment.stop()
        store = Warehouse(deployment.warehouse)
        shards = [json.loads(p.read_text()) for p in (store.published(two) / "_shards").glob("shard-*.json")]
        direct = Warehouse(root / "direct")
        subprocess.run([str(BIN / "wirespeed"), "ingest", str(deployment.landing / two), "--warehouse", str(direct.root),
                        "--quiet"], check=True, capture_output=True,
                       env={k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "WIRESPEED_EXECUTOR")})
        differ = tables_differ(direct, store, list(TABLES), runs=[two])
        shutil.rmtree(root)
        return {
            "workers": sorted({shard["host"] for shard in shards}),
            "identical_tables": differ == {},
            "tables_differing": differ,
            "runs_ingested": sum(1 for count in state["materialized"].values() if count == 1),
            "runs_ingested_twice": sorted(run for run, count in state["materialized"].items() if count > 1),
            "runs_landed": len(state["materialized"]),
            "dagster_runs": state["dagster_runs"],
            "seconds_one_worker": round(state["seconds"][one], 1),
            "seconds_two_workers": round(state["seconds"][two], 1),
            "most_runs_at_once": state["most_runs_at_once"],
            "steps": state["steps"],
            "shards": len(shards),
            "cores": os.cpu_count(),
        }
    except BaseException as problem:
        for folder in root.iterdir():
            if folder.name != "logs":
                shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"{problem} (the servers', daemon's and workers' logs are kept in {root / 'logs'})") from problem


def _check(result: subprocess.CompletedProcess) -> None:
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, result.args))[-200:]} failed ({result.returncode}): {result.stderr or result.stdout}")


def _wait(ready, what: str, timeout: float, interval: float = 1) -> None:
    deadline = time.time() + timeout
    while not ready():
        if time.time() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(interval)


if __name__ == "__main__":
    if sys.argv[1:2] == ["status"]:
        print(json.dumps(status(sys.argv[2:])))
