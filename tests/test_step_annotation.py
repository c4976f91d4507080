"""Steps from an annotation the user names, for traces without ProfilerStep#<n>: each instance on a
rank is a step, numbered 0, 1, 2, ... in order of start, as HTA counts an annotation's instances."""

from __future__ import annotations

import gzip
import json
import shutil

import dagster as dg
import pytest

from conftest import TRACES, ingest_directly, table_rows, wirespeed
from pipelines import settings
from pipelines.warehouse.store import Warehouse

# A benchmark harness's trace: no ProfilerStep, but record_function annotations around each
# warmup and measured forward pass (each pass is two nested instances of the same name).
BENCHMARK = TRACES / "hta_critical_path" / "simple_add" / "benchmark_result_493459_1694039959_trace.json.gz"
# A DDP training trace with ProfilerStep#4 to #6, each holding a `## forward ##` annotation.
TRAINING = TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz"
STEP_SPANS = "SELECT step, start_ns, end_ns FROM steps WHERE run_id = ? ORDER BY step"


def annotation_spans(text: str) -> list[tuple[int, int]]:
    """The spans (ns) of the benchmark's CPU annotations whose names hold `text`, read from the raw
    file (its times are whole microseconds since the epoch), in order of start, outer first."""
    events = json.loads(gzip.decompress(BENCHMARK.read_bytes()))["traceEvents"]
    found = [(e["ts"], -e["dur"]) for e in events if e.get("cat") == "user_annotation" and text in e["name"]]
    return [(ts * 1000, (ts - negative_dur) * 1000) for ts, negative_dur in sorted(found)]


def spans(rows: list[dict]) -> list[tuple[int, int, int]]:
    return [(r["step"], r["start_ns"], r["end_ns"]) for r in rows]


def test_the_command_makes_each_instance_of_the_annotation_a_step(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    result = wirespeed("ingest", str(BENCHMARK), "--run-id", "bench", "--step-annotation", "measure|forward",
                       "--warehouse", warehouse, "--quiet")
    assert "steps_found" not in result.stdout
    steps = json.loads(wirespeed("sql", "SELECT step, start_ns, end_ns FROM steps ORDER BY step", "--warehouse", warehouse,
                                 "--format", "json").stdout)
    expected = annotation_spans("measure|forward")
    assert len(expected) == 2
    assert spans(steps) == [(0, *expected[0]), (1, *expected[1])]
    breakdown = json.loads(wirespeed("sql", "SELECT step, step_ns FROM step_breakdown ORDER BY step", "--warehouse", warehouse,
                                     "--format", "json").stdout)
    assert breakdown and all(row["step_ns"] > 0 for row in breakdown)

    # Without the option the same trace has no steps at all.
    wirespeed("ingest", str(BENCHMARK), "--run-id", "plain", "--warehouse", warehouse, "--quiet")
    assert json.loads(wirespeed("sql", "SELECT count(*) AS n FROM steps", "--run", "plain", "--warehouse", warehouse,
                                "--format", "json").stdout) == [{"n": 0}]


def test_an_annotation_the_trace_lacks_is_reported_not_silent(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    result = wirespeed("ingest", str(BENCHMARK), "--run-id", "typo", "--step-annotation", "ProfilerStep#",
                       "--warehouse", warehouse, "--quiet")
    assert "parse issues" in result.stderr and "steps_found" in result.stdout
    issues = json.loads(wirespeed("sql", "SELECT severity, reason FROM parse_issues", "--warehouse", warehouse,
                                  "--format", "json").stdout)
    assert issues == [{"severity": "warning",
                       "reason": "no timed event on the CPU has a name holding the step annotation 'ProfilerStep#': "
                                 "rank 0 has no steps"}]
    assert wirespeed("ingest", str(BENCHMARK), "--step-annotation", "", "--warehouse", warehouse, check=False).returncode != 0


def test_on_a_profiled_training_run_the_annotation_replaces_profiler_steps(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    ingest_directly(store, TRAINING, "profiler")
    ingest_directly(store, TRAINING, "prefix", overrides={"step_annotation": "ProfilerStep#"})
    ingest_directly(store, TRAINING, "forward", overrides={"step_annotation": "## forward ##"})
    ingest_directly(store, TRAINING, "substring", overrides={"step_annotation": "forward"})

    profiler = spans(table_rows(store, STEP_SPANS, ["profiler"]))
    assert [step for step, _, _ in profiler] == [4, 5, 6]
    # `ProfilerStep#` is held by every profiler step's name: the same spans, numbered from 0.
    assert spans(table_rows(store, STEP_SPANS, ["prefix"])) == [(n - 4, start, end) for n, start, end in profiler]
    breakdown = "SELECT step, step_ns, exposed_comm_ns FROM step_breakdown WHERE run_id = ? ORDER BY step"
    assert [(r["step"] + 4, r["step_ns"]) for r in table_rows(store, breakdown, ["prefix"])] == [
        (r["step"], r["step_ns"]) for r in table_rows(store, breakdown, ["profiler"])]

    forward = table_rows(store, "SELECT ts_ns AS start_ns, ts_ns + dur_ns AS end_ns FROM trace_events "
                                "WHERE run_id = 'forward' AND name = '## forward ##' AND cat = 'user_annotation' ORDER BY ts_ns")
    assert spans(table_rows(store, STEP_SPANS, ["forward"])) == [(n, r["start_ns"], r["end_ns"]) for n, r in enumerate(forward)]
    # `forward` is held by `## forward ##` and the DistributedDataParallel.forward inside each;
    # the copies the profiler draws on the GPU's timeline are not instances.
    substring = spans(table_rows(store, STEP_SPANS, ["substring"]))
    assert [step for step, _, _ in substring] == list(range(6))
    assert [s[1:] for s in substring[::2]] == [(r["start_ns"], r["end_ns"]) for r in forward]


def test_wirespeed_toml_names_the_annotation_and_the_command_line_wins(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    (store.root / "wirespeed.toml").write_text('[steps]\nannotation = "measure|forward"\n')
    configured = settings.load(store.root)
    assert configured.step_annotation == "measure|forward"
    ingest_directly(store, BENCHMARK, "toml", settings=configured)
    ingest_directly(store, BENCHMARK, "flag", settings=configured, overrides={"step_annotation": "warmup|forward"})
    measured, warmup = annotation_spans("measure|forward"), annotation_spans("warmup|forward")
    assert spans(table_rows(store, STEP_SPANS, ["toml"])) == [(n, *span) for n, span in enumerate(measured)]
    assert spans(table_rows(store, STEP_SPANS, ["flag"])) == [(n, *span) for n, span in enumerate(warmup)]


@pytest.mark.parametrize("steps, complaint", [
    ('annotation = ""', r"\[steps\] annotation must be an annotation's name"),
    ("annotation = 4", r"\[steps\] annotation must be an annotation's name"),
    ('name = "forward"', r"\[steps\] name is not a setting"),
])
def test_a_bad_steps_section_names_the_file_and_key(tmp_path, steps, complaint):
    (tmp_path / "wirespeed.toml").write_text(f"[steps]\n{steps}\n")
    with pytest.raises(ValueError, match=rf"{tmp_path / 'wirespeed.toml'}: {complaint}"):
        settings.load(tmp_path)


def test_the_command_refuses_a_bad_steps_section(tmp_path):
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    (warehouse / "wirespeed.toml").write_text('[steps]\nannotation = ""\n')
    result = wirespeed("ingest", str(BENCHMARK), "--warehouse", str(warehouse), "--quiet", check=False)
    assert result.returncode == 2 and "wirespeed.toml: [steps] annotation" in result.stderr


def test_the_dagster_assets_find_the_same_steps(tmp_path):
    """A run landed for the sensor takes wirespeed.toml's annotation; one registered by
    `wirespeed ingest --step-annotation` keeps its own on every materialisation."""
    from pipelines.definitions import defs
    from pipelines.defs.resources import WarehouseResource

    landing, root = tmp_path / "landing", tmp_path / "warehouse"
    (landing / "landed").mkdir(parents=True)
    shutil.copy(BENCHMARK, landing / "landed" / BENCHMARK.name)
    store = Warehouse(root)
    store.ensure()
    (root / "wirespeed.toml").write_text('[steps]\nannotation = "measure|forward"\n')
    store.register_source("registered", BENCHMARK, {"step_annotation": "warmup|forward"})
    resource = WarehouseResource(root=str(root), landing=str(landing))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("runs", ["landed", "registered"])
    job = defs().get_repository_def().get_job("ingest_job")
    for name in ("landed", "registered"):
        outcome = job.execute_in_process(partition_key=name, instance=instance, resources={"warehouse": resource},
                                         run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
        assert outcome.success
        assert {e.check_name: e.passed for e in outcome.get_asset_check_evaluations()}["steps_found"]
    measured, warmup = annotation_spans("measure|forward"), annotation_spans("warmup|forward")
    assert spans(table_rows(store, STEP_SPANS, ["landed"])) == [(n, *span) for n, span in enumerate(measured)]
    assert spans(table_rows(store, STEP_SPANS, ["registered"])) == [(n, *span) for n, span in enumerate(warmup)]
