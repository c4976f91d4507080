"""The Flight Recorder: real 3-rank gloo jobs that hang or desync, through the collectors, ingest and SQL.

Each job is `collectors.faulty_job` under `wirespeed collect` (the ranks dump their recorders
through `Capture`), ingested by `wirespeed ingest` and read back with `wirespeed sql`. The
process groups time out after 3 s, so a hang costs seconds. torchfrtrace, PyTorch's own analyser,
is run on the same dumps and must find the same problems.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import pickle  # only to hand torchfrtrace the dumps in the one form it reads
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectors.demo_ddp import free_port
from conftest import REPO, wirespeed

RANKS = 3
FAULT_STEP = 2
# Each step of the job all-reduces its four gradients, then receives one broadcast.
PER_STEP = 5
STEPS = 5
GLOO = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}


def job(*options: str) -> list[str]:
    return [sys.executable, "-m", "collectors.faulty_job", "--world-size", str(RANKS), "--steps", str(STEPS),
            "--fault-step", str(FAULT_STEP), *options]


def collect(landing: Path, run_id: str, *options: str) -> Path:
    wirespeed("collect", "--landing", str(landing), "--run-id", run_id, "--", *job(*options), env=GLOO, check=False)
    return landing / run_id


def sql_json(warehouse: Path, query: str) -> list[dict]:
    return json.loads(wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json").stdout)


def dump_sections(run: Path) -> dict[int, dict]:
    return {section["rank"]: section for section in (json.loads(p.read_text())["wirespeed"] for p in (run / "fr").glob("rank*.json"))}


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fr-landing")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fr-warehouse") / "warehouse"


def report_sections(line: str) -> list[tuple[str, str]]:
    """(title, HTML) of each section of the report a result line names."""
    page = Path(line.rsplit("; report ", 1)[1]).read_text()
    return re.findall(r"<section><h2>(.*?)</h2>(.*?)</section>", page, re.S)


def ingested(run: Path, warehouse: Path) -> str:
    """Ingest a run folder; its result line."""
    result = wirespeed("ingest", str(run), "--warehouse", str(warehouse), "--quiet")
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(f"{run.name}: ")]
    return line


@pytest.fixture(scope="module")
def skipped(landing, warehouse):
    """Rank 2 never enters step 2's first all-reduce; ranks 0 and 1 time out in it."""
    run = collect(landing, "skip", "--fault", "skip", "--timeout-s", "3")
    return run, ingested(run, warehouse)


@pytest.fixture(scope="module")
def resized(landing, warehouse):
    """Rank 2 receives step 2's broadcast into a buffer twice the size: gloo lets it pass."""
    run = collect(landing, "size", "--fault", "size", "--timeout-s", "3")
    return run, ingested(run, warehouse)


@pytest.fixture(scope="module")
def clean(landing, warehouse):
    run = collect(landing, "clean", "--fault", "none", "--timeout-s", "3")
    return run, ingested(run, warehouse)


def test_a_rank_that_never_enters_a_collective_is_named_with_its_group_and_sequence_id(skipped, warehouse):
    run, line = skipped
    sections = dump_sections(run)
    assert sorted(sections) == [0, 1, 2]
    # Ranks 0 and 1 dumped on the timeout's exception, rank 2 when the launcher ended it.
    assert all("Timed out" in sections[r]["reason"] for r in (0, 1)) and sections[2]["reason"] == "SIGTERM"
    (row,) = sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'skip'")
    hung = FAULT_STEP * PER_STEP + 1  # the first collective of the step rank 2 never began
    assert (row["problem"], row["pg_desc"], row["seq_id"], row["op"]) == ("rank missing", "default_pg", hung, "all_reduce")
    assert json.loads(row["missing_ranks"]) == [2] and json.loads(row["entered_ranks"]) == [0, 1] and row["is_first"]
    last = sql_json(warehouse, "SELECT rank, max(seq_id) AS last FROM fr_entries WHERE run_id = 'skip' GROUP BY rank ORDER BY rank")
    assert [r["last"] for r in last] == [hung, hung, hung - 1]
    # The verdict, in words and on the ingest's result line: who, what, who waited, where rank 2 was.
    verdict = row["verdict"]
    assert verdict.startswith(f"rank 2 never entered all_reduce #{hung} of default_pg: ranks 0, 1 waited in it (timeout 3 s)")
    assert f"rank 2's last collective there was broadcast #{hung - 1}" in verdict and "its stack when dumped: train (faulty_job.py:" in verdict
    assert line.startswith(f"skip: HANG: {verdict};") and "collectives_agree_across_ranks" in line
    # The report opens on it.
    sections = report_sections(line)
    assert sections[0][0] == "Did the job hang, or its ranks disagree?" and html.escape(verdict) in sections[0][1]


def test_a_size_mismatch_is_named_as_one(resized, warehouse):
    run, line = resized
    assert {r: s["reason"] for r, s in dump_sections(run).items()} == {0: "end", 1: "end", 2: "end"}  # nobody noticed
    (row,) = sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'size'")
    broadcast = FAULT_STEP * PER_STEP + PER_STEP
    assert (row["problem"], row["seq_id"], row["op"]) == ("size mismatch", broadcast, "broadcast")
    assert json.loads(row["mismatched_ranks"]) == [2] and json.loads(row["entered_ranks"]) == [0, 1, 2]
    assert row["detail"] == "ranks 0, 1: broadcast [[64]] Float; rank 2: broadcast [[128]] Float"
    assert row["verdict"] == f"rank 2's collective #{broadcast} of default_pg differs from ranks 0, 1's (a size mismatch): {row['detail']}"
    assert line.startswith(f"size: MISMATCH: {row['verdict']};")


def test_a_clean_job_has_no_mismatch_and_every_collective_of_every_step(clean, warehouse):
    run, line = clean
    assert sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'clean'") == []
    dumps = sql_json(warehouse, "SELECT rank, recorder, rank_source, reason, entries, buffer_entries, host FROM fr_dumps WHERE run_id = 'clean' ORDER BY rank")
    assert [(d["rank"], d["recorder"], d["rank_source"], d["reason"]) for d in dumps] == [(r, "generic", "collector", "end") for r in range(RANKS)]
    # Every collective of every step, profiled or not (the profiler saw two steps).
    assert all(d["entries"] == STEPS * PER_STEP and d["buffer_entries"] == 2000 and d["host"] for d in dumps)
    sizes = sql_json(warehouse, "SELECT op, bytes, count(*) AS n FROM fr_entries WHERE run_id = 'clean' GROUP BY ALL ORDER BY bytes, op")
    # Per rank and step: the gradients of the biases (1 and 64 floats) and weights (1 x 64 and
    # 64 x 64 floats), then the broadcast of 64 floats.
    each = RANKS * STEPS
    assert [(s["op"], s["bytes"], s["n"]) for s in sizes] == [
        ("allreduce", 4, each), ("allreduce", 256, 2 * each), ("broadcast", 256, each), ("allreduce", 16384, each),
    ]
    groups = sql_json(warehouse, "SELECT DISTINCT pg_name, pg_desc, pg_ranks, ranks_source FROM fr_process_groups WHERE run_id = 'clean'")
    assert groups == [{"pg_name": "0", "pg_desc": "default_pg", "pg_ranks": "[0, 1, 2]", "ranks_source": "collector"}]
    assert line.startswith("clean: exposed communication") and "HANG" not in line and "MISMATCH" not in line
    sections = dict(report_sections(line))
    assert "Did the job hang, or its ranks disagree?" not in sections
    assert "they agree: every rank entered every collective" in sections["Flight Recorder: did every rank make the same calls?"]


def torchfrtrace(run: Path, folder: Path) -> str:
    """torchfrtrace's analysis of a run's dumps. It reads pickles only, and torch 2.13's gloo
    backend leaves the groups' members out of its dumps (torchfrtrace then fails on a KeyError),
    so the test writes each rank's JSON dump, with the members the collector recorded, as the
    pickle torchfrtrace expects; wirespeed itself never sees these files."""
    folder.mkdir()
    for path in (run / "fr").glob("rank*.json"):
        dump = json.loads(path.read_text())
        section = dump.pop("wirespeed")
        dump["pg_config"] = {g["name"]: {"name": g["name"], "desc": g["desc"], "ranks": str(g["ranks"])} for g in section["process_groups"]}
        (folder / f"rank{section['rank']}").write_bytes(pickle.dumps(dump))
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder), "--prefix", "rank"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_torchfrtrace_finds_the_same_problems(skipped, resized, clean, warehouse, tmp_path):
    hang = torchfrtrace(skipped[0], tmp_path / "skip")
    (row,) = sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'skip'")
    assert f"Not all ranks joining collective, sequence number: {row['seq_id']}" in hang
    assert f"group info: {row['pg_name']}:{row['pg_desc']}" in hang and f"collective: gloo:{row['op']}" in hang
    assert re.search(r"missing ranks: \{(.*)\}", hang).group(1) == ", ".join(map(str, json.loads(row["missing_ranks"])))

    mismatch = torchfrtrace(resized[0], tmp_path / "size")
    (row,) = sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'size'")
    assert f"Collective sequence number: {row['seq_id']} has errors" in mismatch
    culprits = re.findall(r"Culprit rank (\d+); Error type: (\w+)", mismatch)
    assert culprits == [(str(r), "SIZE_OR_SYNTAX_MISMATCH") for r in json.loads(row["mismatched_ranks"])]

    assert torchfrtrace(clean[0], tmp_path / "clean").strip() == ""


def wait_for(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def session(sid: int) -> list[int]:
    """The processes still alive in a session (the launcher's, and the job it started)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def test_a_scheduler_killing_a_hung_job_still_leaves_every_dump(landing, warehouse):
    """With the process groups' timeout far away, ranks 0 and 1 wait inside the all-reduce (in
    C++, where no Python signal handler runs) and rank 2 sleeps. SIGUSR1 to every process dumps
    them all and the job goes on; SIGTERM, as a scheduler sends it, dumps them again and ends
    the job at once, even though the launcher starts with SIGTERM ignored, as under a shell or a
    harness that ignores it (in two full test runs this test failed as it does then, on the code
    that started the job before passing signals on)."""
    run, output = landing / "killed", landing / "killed.log"
    collect = [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(landing), "--run-id", "killed", "--",
               *job("--fault", "skip", "--timeout-s", "120")]
    ignoring = f"import os, signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); os.execv({collect[0]!r}, {collect!r})"
    with open(output, "w") as sink:
        launcher = subprocess.Popen(
            [sys.executable, "-c", ignoring],
            cwd=REPO, env=GLOO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_for(lambda: "hanging at step" in output.read_text(), 120)
        time.sleep(2)  # ranks 0 and 1 reach the all-reduce
        os.killpg(launcher.pid, signal.SIGUSR1)  # every process: the launchers ignore it
        wait_for(lambda: [s["reason"] for s in dump_sections(run).values()] == ["SIGUSR1"] * RANKS, 30)
        assert launcher.poll() is None  # the job goes on
        started = time.monotonic()
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=60)
        wait_for(lambda: not session(launcher.pid), 30)
        assert time.monotonic() - started < 20  # not the 120 s of the timeout
    finally:
        for pid in session(launcher.pid):
            os.kill(pid, signal.SIGKILL)
    sections = dump_sections(run)
    for rank, section in sections.items():
        history = [earlier["reason"] for earlier in section["earlier"]] + [section["reason"]]
        assert history[0] == "SIGUSR1" and "SIGTERM" in history, (rank, history)
    # Ranks 0 and 1 were dumped while their main thread waited inside the collective.
    for rank in (0, 1):
        (main, *_) = sections[rank]["stacks"]
        assert main["main"] and main["frames"][0]["name"] == "all_reduce", main["frames"][:3]
    assert (run / "_DONE").is_file()
    line = ingested(run, warehouse)
    (row,) = sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'killed'")
    hung = FAULT_STEP * PER_STEP + 1
    assert (row["problem"], row["seq_id"], json.loads(row["missing_ranks"])) == ("rank missing", hung, [2])
    # The recorder saw them still in it: gloo had not given up on it yet.
    assert json.loads(row["unfinished_ranks"]) == [0, 1]
    assert row["verdict"].startswith(f"rank 2 never entered all_reduce #{hung} of default_pg: ranks 0, 1 waited in it (timeout 120 s)")
    assert f"HANG: {row['verdict']}" in line


TORCH_DUMPS = """
import os, pickle, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, folder, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="100")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    tensor = torch.ones(10)
    for _ in range(3):
        dist.all_reduce(tensor)
    dist.broadcast(tensor, 0)
    c10d = torch._C._distributed_c10d
    # gloo's worker retires the last entry after the caller has returned: both dumps wait for it,
    # or they may catch that entry at two moments (one run's JSON and pickle rows of it differed).
    deadline = time.monotonic() + 30
    while not all(e["retired"] for e in pickle.loads(c10d._dump_fr_trace())["entries"]):
        assert time.monotonic() < deadline, "the recorder never retired every entry"
        time.sleep(0.01)
    with open(os.path.join(folder, "json", f"nccl_trace_rank_{rank}"), "wb") as out:
        out.write(c10d._dump_fr_trace_json())
    with open(os.path.join(folder, "pickle", f"nccl_trace_rank_{rank}"), "wb") as out:
        out.write(c10d._dump_fr_trace())
    dist.destroy_process_group()

if __name__ == "__main__":
    from collectors.demo_ddp import free_port
    mp.spawn(run, args=(sys.argv[1], free_port()), nprocs=2)
"""


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def entries_of(warehouse: Path, run_id: str) -> list[dict]:
    """A run's fr_entries as the matching sees them: every column but the run, the file and the stack."""
    rows = sql_json(warehouse, f"SELECT * EXCLUDE (run_id, file, frames) FROM fr_entries WHERE run_id = '{run_id}' ORDER BY rank, record_id")
    assert rows
    return rows


def test_torchs_own_dumps_ingest_as_json_and_as_pickles(tmp_path, warehouse):
    """A job that dumps its recorder itself, as torch writes it: JSON files named by rank, no
    wirespeed section; and the same recorder as pickles, which give the same rows and the stacks."""
    dumps = tmp_path / "dumps"
    for form in ("json", "pickle"):
        (dumps / form).mkdir(parents=True)
    script = tmp_path / "torch_dumps.py"
    script.write_text(TORCH_DUMPS)
    subprocess.run([sys.executable, str(script), str(dumps)], cwd=REPO, env={**GLOO, "PYTHONPATH": str(REPO)}, check=True, timeout=120)
    before = digest(dumps)

    for form in ("json", "pickle"):
        ingested(dumps / form, warehouse)
        rows = sql_json(warehouse, f"SELECT rank, rank_source, reason, entries FROM fr_dumps WHERE run_id = '{form}' ORDER BY rank")
        assert rows == [{"rank": r, "rank_source": "file name", "reason": None, "entries": 4} for r in (0, 1)]
        assert sql_json(warehouse, f"SELECT count(*) AS n FROM fr_mismatches WHERE run_id = '{form}'") == [{"n": 0}]
        assert sql_json(warehouse, f"SELECT count(*) AS n FROM parse_issues WHERE run_id = '{form}'") == [{"n": 0}]
        (run,) = sql_json(warehouse, f"SELECT source_kind, world_size FROM runs WHERE run_id = '{form}'")
        assert run == {"source_kind": "flight recorder folder", "world_size": 2}
    # The pickles' tuples and None times read as the JSON's lists and zeros; only they have stacks.
    assert entries_of(warehouse, "pickle") == entries_of(warehouse, "json")
    stacks = sql_json(warehouse, "SELECT run_id, count(frames) AS n FROM fr_entries GROUP BY run_id HAVING run_id IN ('json', 'pickle') ORDER BY run_id")
    assert stacks == [{"run_id": "json", "n": 0}, {"run_id": "pickle", "n": 8}]

    # Side by side, each rank is read once, from its pickle, and its JSON is named.
    ingested(dumps, warehouse)
    assert sql_json(warehouse, "SELECT count(*) AS n FROM fr_entries WHERE run_id = 'dumps' AND file LIKE '%/pickle/%'") == [{"n": 8}]
    named = sql_json(warehouse, "SELECT file, severity, reason FROM parse_issues WHERE run_id = 'dumps' ORDER BY file")
    assert [(Path(r["file"]).parent.name, r["severity"]) for r in named] == [("json", "warning"), ("json", "warning")]
    assert all(r["reason"].startswith("not loaded: rank ") and "/pickle/nccl_trace_rank_" in r["reason"] for r in named)
    assert digest(dumps) == before


HUNG_DUMPS = """
import datetime, os, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, folder, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCH_FR_BUFFER_SIZE="100")
    dist.init_process_group("gloo", rank=rank, world_size=3, timeout=datetime.timedelta(seconds=3))
    tensor = torch.ones(16)
    try:
        for _ in range(4 if rank == 2 else 5):
            dist.all_reduce(tensor)
    except RuntimeError:
        pass  # ranks 0 and 1 time out in the fifth, which rank 2 never enters
    c10d = torch._C._distributed_c10d
    for form, dump in (("json", c10d._dump_fr_trace_json), ("pickle", c10d._dump_fr_trace)):
        with open(os.path.join(folder, form, f"rank{rank}"), "wb") as out:
            out.write(dump())
    if rank == 2:
        time.sleep(6)  # until the others gave up

if __name__ == "__main__":
    from collectors.demo_ddp import free_port
    mp.spawn(run, args=(sys.argv[1], free_port()), nprocs=3)
"""


def test_a_hung_jobs_pickled_dumps_name_the_missing_rank_as_its_json_dumps_do(tmp_path, warehouse):
    dumps = tmp_path / "hung"
    for form in ("json", "pickle"):
        (dumps / form).mkdir(parents=True)
    script = tmp_path / "hung_dumps.py"
    script.write_text(HUNG_DUMPS)
    subprocess.run([sys.executable, str(script), str(dumps)], cwd=REPO, env={**GLOO, "PYTHONPATH": str(REPO)}, check=True, timeout=120)
    lines = {form: ingested(dumps / form, warehouse) for form in ("json", "pickle")}
    found = {
        form: sql_json(warehouse, f"SELECT * EXCLUDE (run_id) FROM fr_mismatches WHERE run_id = '{form}'")
        for form in ("json", "pickle")
    }
    assert found["pickle"] == found["json"]
    (row,) = found["pickle"]
    assert (row["problem"], row["seq_id"], json.loads(row["missing_ranks"]), json.loads(row["entered_ranks"])) == ("rank missing", 5, [2], [0, 1])
    assert lines["pickle"].startswith(f"pickle: HANG: {row['verdict']}")
    assert entries_of(warehouse, "pickle") == entries_of(warehouse, "json")


class RunsACommand:
    """What a hostile pickle holds: loading it with pickle.load runs `touch <marker>`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_hostile_pickle_runs_nothing_and_is_named(tmp_path, warehouse):
    """Pickles that look like dumps (their first bytes name the recorder's keys) and would run a
    command when loaded: in an entry (by protocol 4, STACK_GLOBAL), as a whole table (protocol 2, GLOBAL)."""
    marker = tmp_path / "ran"
    folder = tmp_path / "hostile"
    folder.mkdir()
    entry = {"collective_seq_id": 1, "profiling_name": "gloo:all_reduce", "input_sizes": RunsACommand(marker)}
    hostile = {
        "nccl_trace_rank_0": pickle.dumps({"version": "2.10", "pg_status": {}, "entries": [entry]}),
        "nccl_trace_rank_1": pickle.dumps({"pg_config": {}, "pg_status": RunsACommand(marker)}, protocol=2),
    }
    for name, data in hostile.items():
        pickle.loads(data)  # what loading it would do: run the command
        assert marker.exists()
        marker.unlink()
        (folder / name).write_bytes(data)
    ingested(folder, warehouse)
    assert not marker.exists()
    issues = sql_json(warehouse, "SELECT file, severity, reason FROM parse_issues WHERE run_id = 'hostile' ORDER BY file")
    assert [(Path(i["file"]).name, i["severity"]) for i in issues] == [("nccl_trace_rank_0", "error"), ("nccl_trace_rank_1", "error")]
    for issue in issues:
        assert issue["reason"] == ("not loaded: a pickle that is not a plain Flight Recorder dump (it names the global "
                                   f"{os.system.__module__}.system); nothing in it ran"), issue
    assert sql_json(warehouse, "SELECT count(*) AS n FROM fr_entries WHERE run_id = 'hostile'") == [{"n": 0}]


def test_a_damaged_dump_is_named_and_the_rest_of_the_run_ingests(clean, tmp_path, warehouse):
    run = tmp_path / "damaged"
    shutil.copytree(clean[0], run)
    (run / "manifest.json").write_text(json.dumps(json.loads((run / "manifest.json").read_text()) | {"run_id": "damaged"}))
    cut = run / "fr" / "rank0.json"
    cut.write_bytes(cut.read_bytes()[:-300])
    odd = run / "fr" / "rank1.json"
    dump = json.loads(odd.read_text())
    del dump["entries"][3]["collective_seq_id"]
    dump["entries"][4]["input_sizes"] = "[[64]]"
    odd.write_text(json.dumps(dump))
    before = digest(run)
    ingested(run, warehouse)
    issues = sql_json(warehouse, "SELECT file, line, severity, reason FROM parse_issues WHERE run_id = 'damaged' AND file LIKE '%/fr/%' ORDER BY file, reason")
    assert [(Path(i["file"]).name, i["severity"]) for i in issues] == [("rank0.json", "error"), ("rank1.json", "error"), ("rank1.json", "error")]
    assert issues[0]["line"] == 1 and issues[0]["reason"].startswith("not ingested: the Flight Recorder dump is not valid JSON")
    assert [i["reason"] for i in issues[1:]] == ["entry 3 skipped: no collective_seq_id", "entry 4 skipped: input_sizes is str, not list"]
    kept = sql_json(warehouse, "SELECT rank, entries, entries_skipped FROM fr_dumps WHERE run_id = 'damaged' ORDER BY rank")
    assert kept == [{"rank": 1, "entries": STEPS * PER_STEP - 2, "entries_skipped": 2}, {"rank": 2, "entries": STEPS * PER_STEP, "entries_skipped": 0}]
    assert sql_json(warehouse, "SELECT count(*) AS n FROM trace_events WHERE run_id = 'damaged'")[0]["n"] > 0
    assert digest(run) == before


def test_recorded_durations_give_bus_bandwidth_between_profiled_steps(clean, tmp_path, warehouse):
    """gloo times nothing; NCCL with TORCH_NCCL_ENABLE_TIMING=1 writes each entry's `duration_ms`.
    With durations written into a clean run's dumps as NCCL would, the collectives of the steps
    the profiler did not see join collective_bw, marked by source."""
    run = tmp_path / "timed"
    shutil.copytree(clean[0], run)
    (run / "manifest.json").write_text(json.dumps(json.loads((run / "manifest.json").read_text()) | {"run_id": "timed"}))
    for path in (run / "fr").glob("rank*.json"):
        dump = json.loads(path.read_text())
        rank = dump["wirespeed"]["rank"]
        for entry in dump["entries"]:
            entry["duration_ms"] = 0.5 + 0.25 * rank  # rank 0 is the fastest: the transfer
        path.write_text(json.dumps(dump))
    ingested(run, warehouse)
    recorded = sql_json(warehouse, "SELECT * FROM collective_bw WHERE run_id = 'timed' AND source = 'flight recorder' ORDER BY collective_key, rank")
    traced = sql_json(warehouse, "SELECT count(DISTINCT collective_key) AS n FROM collective_bw WHERE run_id = 'timed' AND source = 'trace'")[0]["n"]
    # The profiler saw steps 2 and 3 of five; the recorder's three others join, every rank of each.
    assert traced == 2 * PER_STEP and len(recorded) == 3 * PER_STEP * RANKS
    for row in recorded:
        assert row["step"] is None and row["group_size"] == RANKS and row["scope"] == "intra"
        assert row["transfer_ns"] == 500_000 and row["dur_ns"] == 500_000 + 250_000 * row["rank"]
        factor = {"allreduce": 2 * (RANKS - 1) / RANKS, "broadcast": 1.0}[row["op"]]
        assert row["busbw_gbps"] == pytest.approx(8 * row["bytes"] / row["dur_ns"] * factor)
        assert row["transfer_busbw_gbps"] == pytest.approx(8 * row["bytes"] / 500_000 * factor)


def test_a_collective_entered_by_all_and_finished_by_none_past_its_timeout_is_stuck(clean, tmp_path, warehouse):
    """gloo gives up on a collective at its timeout; NCCL's recorder shows a hung one as entries
    started and never completed, dumped by its watchdog past the timeout. A clean run's last
    collective written that way on ranks 0 and 1 (every earlier one finished), dumped 5 s into its 3 s
    timeout, and rank 2's dump left out, as a rank that died leaves none: the collective itself is stuck."""
    run = tmp_path / "stuck"
    shutil.copytree(clean[0], run)
    (run / "manifest.json").write_text(json.dumps(json.loads((run / "manifest.json").read_text()) | {"run_id": "stuck"}))
    (run / "fr" / "rank2.json").unlink()
    for rank in (0, 1):
        path = run / "fr" / f"rank{rank}.json"
        dump = json.loads(path.read_text())
        *earlier, last = dump["entries"]
        for entry in earlier:  # the clean job's dump may catch its second-last call not yet retired
            entry["retired"] = True
        last.update(state="started", retired=False, time_discovered_started_ns=last["time_created_ns"] + 1000)
        dump["wirespeed"]["dumped_at_ns"] = last["time_created_ns"] + 5 * 10**9
        path.write_text(json.dumps(dump))
    ingested(run, warehouse)
    rows = sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'stuck'")
    assert len(rows) == 1, rows
    (row,) = rows
    assert (row["problem"], row["seq_id"], row["op"]) == ("stuck", STEPS * PER_STEP, "broadcast")
    assert [json.loads(row[k]) for k in ("entered_ranks", "unfinished_ranks", "unknown_ranks", "missing_ranks")] == [[0, 1], [0, 1], [2], []]
    assert row["verdict"] == (
        f"ranks 0, 1 had not finished broadcast #{STEPS * PER_STEP} of default_pg when dumped, past its 3 s timeout, and every "
        "member that left a dump entered it: the collective itself hung (the network, a device or the library), not the "
        "order of calls; rank 2 left no dump"
    )


# --- jobs in plain torch: no wirespeed code in them; `collect` arms the recorder itself -------------

PLAIN_JOB = """
import datetime, os, socket, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp

def train(rank, world, fault, timeout_s):
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
    tensor = torch.ones(64)
    for step in range(5):
        faulty = rank == world - 1 and step == 2
        if faulty and fault == "skip":
            print(f"rank {rank}: hanging at step {step}", flush=True)
            time.sleep(600)
        if faulty and fault == "leave":
            return
        dist.all_reduce(tensor)
        dist.broadcast(torch.zeros(128 if faulty and fault == "size" else 64), 0)
    dist.destroy_process_group()

def spawned(rank, port, fault, timeout_s):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(rank, 3, fault, timeout_s)

if __name__ == "__main__":
    fault, timeout_s = sys.argv[1], float(sys.argv[2])
    if "TORCHELASTIC_RUN_ID" in os.environ:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), fault, timeout_s)
    else:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        mp.spawn(spawned, args=(port, fault, timeout_s), nprocs=3)
"""
# Each step: an all-reduce, then a broadcast; the last rank goes wrong at step 2.
PLAIN_HUNG_SEQ = 5  # step 2's all-reduce
PLAIN_RESIZED_SEQ = 6  # step 2's broadcast


@pytest.fixture(scope="module")
def plain_job(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plain")
    (folder / "job.py").write_text(PLAIN_JOB)
    return folder


def plain(plain_job: Path, launcher: str, fault: str, timeout_s: float) -> list[str]:
    script = [str(plain_job / "job.py"), fault, str(timeout_s)]
    if launcher == "torchrun":
        return [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", str(RANKS), "--master-port",
                str(free_port()), *script]
    return [sys.executable, *script]


def collect_plain(landing: Path, run_id: str, command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(landing), "--run-id", run_id,
         "--sample-interval-ms", "0", "--", *command],
        cwd=cwd, env={**GLOO, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_a_plain_jobs_skipped_collective_is_named_from_the_dumps_collect_arms(plain_job, landing, warehouse, launcher):
    """Rank 2 sleeps in step 2; ranks 0 and 1 time out in its all-reduce after 3 s. Under
    torch.multiprocessing the timeout ends their function and spawn exits them; under torchrun it
    reaches the interpreter. Rank 2 is ended by its launcher (SIGTERM)."""
    run_id = f"plain-skip-{launcher}"
    done = collect_plain(landing, run_id, plain(plain_job, launcher, "skip", 3), plain_job)
    assert done.returncode != 0 and "rank 2: hanging at step 2" in done.stdout + done.stderr
    run = landing / run_id
    assert done.stdout.splitlines()[-1].endswith("; no traces: pass --traces DIR, or use Capture")
    sections = dump_sections(run)
    assert sorted(sections) == [0, 1, 2]
    expected = "exit" if launcher == "spawn" else "exception: "
    assert all(sections[r]["reason"].startswith(expected) for r in (0, 1)) and sections[2]["reason"] == "SIGTERM", sections
    if launcher == "torchrun":
        assert all("Timed out" in sections[r]["reason"] for r in (0, 1))
    assert all(s["process_groups"] == [{"name": "0", "desc": "default_pg", "ranks": [0, 1, 2]}] for s in sections.values())
    line = ingested(run, warehouse)
    (row,) = sql_json(warehouse, f"SELECT * FROM fr_mismatches WHERE run_id = '{run_id}'")
    assert (row["problem"], row["seq_id"], json.loads(row["missing_ranks"]), json.loads(row["entered_ranks"])) == (
        "rank missing", PLAIN_HUNG_SEQ, [2], [0, 1])
    assert row["verdict"].startswith(f"rank 2 never entered all_reduce #{PLAIN_HUNG_SEQ} of default_pg: ranks 0, 1 waited in it (timeout 3 s)")
    assert "its stack when dumped: train (job.py:" in row["verdict"]
    assert line.startswith(f"{run_id}: HANG: {row['verdict']};")
    title, text = report_sections(line)[0]
    assert title == "Did the job hang, or its ranks disagree?" and html.escape(row["verdict"]) in text


def test_a_plain_jobs_rank_that_leaves_early_is_named_though_it_dumped_first(plain_job, landing, warehouse):
    """Rank 2 returns at step 2 and its process exits, dumping, before the others enter the
    all-reduce it left them in; they fail at once (the connection closed) or at the timeout, or
    `mp.spawn`, seeing a rank fail, ends the rest with SIGTERM first, and they dump then."""
    done = collect_plain(landing, "plain-leave", plain(plain_job, "spawn", "leave", 3), plain_job)
    assert done.returncode != 0
    sections = dump_sections(landing / "plain-leave")
    reasons = {r: s["reason"] for r, s in sections.items()}
    assert reasons.pop(2) == "exit" and reasons.keys() == {0, 1} and set(reasons.values()) <= {"exit", "SIGTERM"}, sections
    line = ingested(landing / "plain-leave", warehouse)
    (row,) = sql_json(warehouse, "SELECT * FROM fr_mismatches WHERE run_id = 'plain-leave'")
    assert (row["problem"], row["seq_id"], json.loads(row["missing_ranks"])) == ("rank missing", PLAIN_HUNG_SEQ, [2])
    assert line.startswith(f"plain-leave: HANG: rank 2 never entered all_reduce #{PLAIN_HUNG_SEQ} of default_pg")


@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_a_plain_jobs_size_mismatch_is_named(plain_job, landing, warehouse, launcher):
    run_id = f"plain-size-{launcher}"
    done = collect_plain(landing, run_id, plain(plain_job, launcher, "size", 30), plain_job)
    assert done.returncode == 0, done.stderr
    assert {r: s["reason"] for r, s in dump_sections(landing / run_id).items()} == {0: "exit", 1: "exit", 2: "exit"}
    line = ingested(landing / run_id, warehouse)
    (row,) = sql_json(warehouse, f"SELECT * FROM fr_mismatches WHERE run_id = '{run_id}'")
    assert (row["problem"], row["seq_id"], json.loads(row["mismatched_ranks"])) == ("size mismatch", PLAIN_RESIZED_SEQ, [2])
    assert row["detail"] == "ranks 0, 1: broadcast [[64]] Float; rank 2: broadcast [[128]] Float"
    assert line.startswith(f"{run_id}: MISMATCH: {row['verdict']};")


@pytest.mark.parametrize("launcher", ["spawn", "torchrun"])
def test_a_plain_job_hung_and_ended_by_sigterm_leaves_every_dump(plain_job, landing, warehouse, launcher):
    """The process group's timeout far away (120 s): ranks 0 and 1 wait inside the all-reduce, in
    C++, and rank 2 sleeps, until a scheduler sends SIGTERM to every process of the job."""
    run_id = f"plain-killed-{launcher}"
    run, output = landing / run_id, landing / f"{run_id}.log"
    argv = [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(landing), "--run-id", run_id,
            "--sample-interval-ms", "0", "--", *plain(plain_job, launcher, "skip", 120)]
    with open(output, "w") as sink:
        launcher = subprocess.Popen(argv, cwd=plain_job, env={**GLOO, "PYTHONPATH": str(REPO)}, stdout=sink,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "hanging at step" in output.read_text(), 120)
        time.sleep(2)  # ranks 0 and 1 reach the all-reduce
        os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=60)
        wait_for(lambda: not session(launcher.pid), 30)
    finally:
        for pid in session(launcher.pid):
            os.kill(pid, signal.SIGKILL)
    sections = dump_sections(run)
    assert sorted(sections) == [0, 1, 2] and all(s["reason"] == "SIGTERM" for s in sections.values()), sections
    for rank in (0, 1):  # dumped while waiting inside the collective
        (main, *_) = sections[rank]["stacks"]
        assert main["main"] and main["frames"][0]["name"] == "all_reduce", main["frames"][:3]
    assert (run / "_DONE").is_file()
    line = ingested(run, warehouse)
    (row,) = sql_json(warehouse, f"SELECT * FROM fr_mismatches WHERE run_id = '{run_id}'")
    assert (row["problem"], row["seq_id"], json.loads(row["missing_ranks"])) == ("rank missing", PLAIN_HUNG_SEQ, [2])
    assert f"HANG: {row['verdict']}" in line


def test_the_injection_chains_the_jobs_sitecustomize_and_arms_nothing_without_a_process_group(tmp_path):
    """A process that imports torch.distributed but makes no process group gets no recorder; the
    job's own sitecustomize still runs; WIRESPEED_INJECT=0 leaves the job's path alone."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['JOBS_OWN_SITECUSTOMIZE'] = 'ran'\n")
    probe = ("import os, sys, torch.distributed as dist; "
             "print(os.environ.get('JOBS_OWN_SITECUSTOMIZE'), 'collectors.flight_recorder' in sys.modules, "
             "dist.init_process_group.__code__.co_filename.endswith('sitecustomize.py'))")
    env = {**GLOO, "PYTHONPATH": os.pathsep.join((str(own), str(REPO)))}
    for inject, printed in (("1", "ran False True"), ("0", "ran False False")):
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(tmp_path), "--run-id", f"probe{inject}",
             "--sample-interval-ms", "0", "--", sys.executable, "-c", probe],
            cwd=tmp_path, env=env | {"WIRESPEED_INJECT": inject}, capture_output=True, text=True, timeout=120,
        )
        assert result.stdout.splitlines()[0] == printed, result.stderr
        assert list((tmp_path / f"probe{inject}" / "fr").iterdir()) == []


ONE_RECORDER = """
import os, threading, torch.distributed as dist
from collectors import flight_recorder
from collectors.capture import Capture

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
armed = flight_recorder.current()
with Capture(wait=0, warmup=0, active=1) as capture:
    print(armed is not None, capture.recorder is armed, sum(t.name == "wirespeed-fr" for t in threading.enumerate()))
dist.destroy_process_group()
"""


def test_a_job_that_uses_capture_gets_one_recorder(tmp_path):
    script = tmp_path / "one.py"
    script.write_text(ONE_RECORDER)
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(tmp_path), "--run-id", "one",
         "--sample-interval-ms", "0", "--", sys.executable, str(script)],
        cwd=tmp_path, env={**GLOO, "PYTHONPATH": str(REPO), "PORT": str(free_port())}, capture_output=True, text=True, timeout=120,
    )
    assert result.stdout.splitlines()[0] == "True True 1", result.stderr
    (section,) = dump_sections(tmp_path / "one").values()
    assert section["reason"] == "end" and section["earlier"] == []  # Capture's last dump, and no other


FORKS_A_WORKER = """
import multiprocessing, os, time, torch, torch.distributed as dist

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
dist.all_reduce(torch.ones(4))

def work():
    print(os.getpid(), flush=True)  # a signal that comes sooner may precede the child's at-fork hooks
    time.sleep(60)

worker = multiprocessing.get_context("fork").Process(target=work)
worker.start()
worker.join()
time.sleep(3)  # longer than the recorder gives a rank stuck on SIGTERM
print(worker.exitcode, os.path.exists(os.path.join(os.environ["WIRESPEED_RUN_DIR"], "fr", "rank0.json")), flush=True)
dist.destroy_process_group()
"""


def test_a_forked_workers_sigterm_ends_the_worker_only_and_dumps_nothing(tmp_path):
    """A data loader's worker, forked from a rank with an armed recorder, inherits its signal
    handlers and the wakeup fd its watcher reads: SIGTERM to the worker (as a data loader's
    shutdown sends) must end the worker alone, without a dump of the rank or an end of the rank."""
    script = tmp_path / "forks.py"
    script.write_text(FORKS_A_WORKER)
    launched = subprocess.Popen(
        [sys.executable, "-m", "pipelines.commands.cli", "collect", "--landing", str(tmp_path), "--run-id", "forks",
         "--sample-interval-ms", "0", "--", sys.executable, str(script)],
        cwd=tmp_path, env={**GLOO, "PYTHONPATH": str(REPO), "PORT": str(free_port())}, stdout=subprocess.PIPE, text=True,
    )
    try:
        os.kill(int(launched.stdout.readline()), signal.SIGTERM)
        assert launched.stdout.readline().split() == [str(-signal.SIGTERM), "False"]
        assert launched.wait(timeout=60) == 0
    finally:
        launched.kill()
    (section,) = dump_sections(tmp_path / "forks").values()
    assert section["reason"] == "exit" and section["earlier"] == []
