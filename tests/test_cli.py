"""The command line: ingest any shape of input, query in three formats, write reports, fail clearly."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import duckdb
import pytest

from conftest import REPO, TRACES, wirespeed

SAMPLED = TRACES / "hta_sampled_2rank"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """Two runs: a bare folder of two rank traces, and a single trace file with an awkward name."""
    root = tmp_path_factory.mktemp("cli")
    awkward = root / "inputs" / "it's a run ü.json.gz"
    awkward.parent.mkdir()
    shutil.copy(TRACES / "hta_single_rank_of_multirank" / "cpu_only_gloo_rank34_of300.pt.trace.json.gz", awkward)
    result = wirespeed("ingest", str(SAMPLED), str(awkward), "--warehouse", str(root / "warehouse"), "--quiet")
    assert len(result.stdout.splitlines()) == 2 and "FAILED" not in result.stdout
    return root / "warehouse"


def test_runs_get_ids_from_their_folder_or_file(warehouse):
    out = wirespeed("sql", "SELECT run_id, ranks_found FROM runs ORDER BY run_id", "--warehouse", str(warehouse), "--format", "json")
    assert json.loads(out.stdout) == [
        {"run_id": "hta_sampled_2rank", "ranks_found": 2},
        {"run_id": "it's a run ü", "ranks_found": 1},
    ]


def test_sql_csv_has_a_header_then_one_line_per_row(warehouse):
    out = wirespeed("sql", "SELECT rank, step, step_ns FROM step_breakdown WHERE run_id = 'hta_sampled_2rank' ORDER BY 1, 2",
                    "--warehouse", str(warehouse), "--format", "csv").stdout
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["rank", "step", "step_ns"] and len(rows) == 5
    assert [r[:2] for r in rows[1:]] == [["0", "551"], ["0", "552"], ["1", "551"], ["1", "552"]]


def test_sql_table_format(warehouse):
    out = wirespeed("sql", "SELECT count(*) AS n FROM collectives", "--warehouse", str(warehouse)).stdout
    assert out.splitlines()[0].strip() == "n" and out.strip().endswith("(1 row)")


def test_sql_makes_views_of_the_tables_a_query_names_or_of_all(warehouse):
    """A query gets views of the tables it names (a join of two here); one that names none of
    them, such as a look at the catalog, sees every table; a query that is not one statement too."""
    from pipelines.commands.query import tables_named
    from pipelines.warehouse.store import ROLLUP_TABLES, TABLES

    assert tables_named("SELECT * FROM Steps JOIN runs USING (run_id)") == ("runs", "steps")
    assert tables_named("SELECT table_name FROM information_schema.tables") == TABLES + ROLLUP_TABLES
    assert tables_named("SET VARIABLE x = 1; SELECT * FROM steps") == TABLES + ROLLUP_TABLES
    out = wirespeed("sql", "SELECT count(DISTINCT s.run_id) AS n FROM steps AS s JOIN runs AS r USING (run_id)",
                    "--warehouse", str(warehouse), "--format", "json").stdout
    assert json.loads(out) == [{"n": 2}]
    out = wirespeed("sql", "SELECT count(*) AS n FROM information_schema.tables WHERE table_name IN ('steps', 'verdict')",
                    "--warehouse", str(warehouse), "--format", "json").stdout
    assert json.loads(out) == [{"n": 2}]


def test_sql_can_call_the_macros_the_tables_are_built_with(warehouse):
    out = wirespeed("sql", "SELECT busbw_factor('allreduce', 8) AS f, round(normal_sf(1.96), 4) AS p",
                    "--warehouse", str(warehouse), "--format", "json").stdout
    assert json.loads(out) == [{"f": 1.75, "p": 0.025}]


def test_sql_errors_are_reported_not_raised(warehouse):
    result = wirespeed("sql", "SELECT * FROM no_such_table", "--warehouse", str(warehouse), check=False)
    assert result.returncode == 2 and "no_such_table" in result.stderr and "Traceback" not in result.stderr


def test_the_command_exits_without_losing_output(warehouse):
    """`wirespeed` skips the interpreter's teardown at exit (pipelines.commands.cli.run): what it printed
    still arrives whole, through a buffered pipe."""
    rows = 200_000
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    result = wirespeed("sql", f"SELECT range AS n FROM range({rows})", "--format", "csv", "--warehouse", str(warehouse), env=buffered)
    lines = result.stdout.splitlines()
    assert len(lines) == rows + 1 and lines[-1] == str(rows - 1)


def test_report_to_a_chosen_file(warehouse, tmp_path):
    target = tmp_path / "out" / "r.html"
    wirespeed("report", "it's a run ü", "-o", str(target), "--warehouse", str(warehouse))
    assert "it&#x27;s a run ü" in target.read_text()


def test_unknown_run_and_missing_path_fail_clearly(warehouse, tmp_path):
    missing = wirespeed("report", "nope", "--warehouse", str(warehouse), check=False)
    assert missing.returncode == 2 and "nope" in missing.stderr
    absent = wirespeed("ingest", str(tmp_path / "absent"), "--warehouse", str(warehouse), check=False)
    assert absent.returncode == 2 and str(tmp_path / "absent") in absent.stderr


def test_a_bad_file_does_not_stop_its_run(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(SAMPLED / "sampled_rank-0.json.gz", folder / "rank0.json.gz")
    (folder / "rank1.json").write_text("this is not json")
    warehouse = tmp_path / "warehouse"
    wirespeed("ingest", str(folder), "--warehouse", str(warehouse), "--quiet")
    issues = json.loads(wirespeed("sql", "SELECT file, severity, reason FROM parse_issues WHERE severity = 'error'", "--warehouse", str(warehouse), "--format", "json").stdout)
    assert [(i["file"].endswith("rank1.json"), i["severity"]) for i in issues] == [(True, "error")]
    assert "not ingested" in issues[0]["reason"]
    ranks = json.loads(wirespeed("sql", "SELECT rank FROM ranks", "--warehouse", str(warehouse), "--format", "json").stdout)
    assert ranks == [{"rank": 0}]
    # The raw inputs are only read.
    assert (folder / "rank1.json").read_text() == "this is not json"


def test_an_open_analyst_session_does_not_block_ingestion(warehouse, tmp_path):
    """An analyst holds the catalog open (read-write, in another process) while a run is ingested."""
    analyst = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys
            con = duckdb.connect({str(warehouse / 'catalog.duckdb')!r})
            print(con.execute("SELECT count(*) FROM runs").fetchall()[0][0], flush=True)
            sys.stdin.readline()
            print(con.execute("SELECT count(*) FROM runs").fetchall()[0][0], flush=True)
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        assert analyst.stdout.readline().strip() == "2"
        shutil.copy(SAMPLED / "sampled_rank-1.json.gz", tmp_path / "third.json.gz")
        wirespeed("ingest", str(tmp_path / "third.json.gz"), "--warehouse", str(warehouse), "--quiet")
        # The analyst's open session sees the new run at its next query: views read the files.
        analyst.stdin.write("\n")
        analyst.stdin.flush()
        assert analyst.stdout.readline().strip() == "3"
    finally:
        analyst.kill()
        analyst.wait()
    con = duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(3,)]
    con.close()


def test_sql_of_some_runs_reads_only_theirs(warehouse):
    """`--run` limits the per-run tables to those runs (the roll-ups stay whole); a run not in the
    warehouse is an error that names it."""
    query = "SELECT (SELECT list(DISTINCT run_id ORDER BY run_id) FROM steps) AS steps, (SELECT count(*) FROM verdict) AS verdicts"
    (everyone,) = json.loads(wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json").stdout)
    assert len(everyone["steps"]) == everyone["verdicts"] >= 2
    out = wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json", "--run", "it's a run ü").stdout
    assert json.loads(out) == [{"steps": ["it's a run ü"], "verdicts": everyone["verdicts"]}]
    out = wirespeed("sql", query, "--warehouse", str(warehouse), "--format", "json",
                    "--run", "it's a run ü", "--run", "hta_sampled_2rank").stdout
    assert json.loads(out) == [{"steps": ["hta_sampled_2rank", "it's a run ü"], "verdicts": everyone["verdicts"]}]
    result = wirespeed("sql", query, "--warehouse", str(warehouse), "--run", "no-such-run", check=False)
    assert result.returncode == 2 and "'no-such-run'" in result.stderr and "Traceback" not in result.stderr
