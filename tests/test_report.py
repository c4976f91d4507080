"""Reports: standalone, offline, rendered by a real browser, and safe against what traces contain."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO, TRACES, ingest_directly
from pipelines.report import report_run
from pipelines.settings import Settings
from pipelines.warehouse.store import Warehouse

BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=15000",
]


def browser_dom(page, profile) -> str:
    """The page's DOM after its scripts ran, in headless Chromium with no network."""
    result = subprocess.run(
        [chromium_path(), *BROWSER_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.fixture(scope="module")
def nccl_report(tmp_path_factory):
    store = Warehouse(tmp_path_factory.mktemp("report") / "warehouse")
    store.ensure()
    ingest_directly(store, TRACES / "hta_ddp_nccl_meta_2024" / "nccl_data.json.gz")
    return report_run(store, Settings(), "nccl_data")


def chromium_path() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("WIRESPEED_REQUIRE_BROWSER"):
            pytest.fail("chromium is required here (WIRESPEED_REQUIRE_BROWSER is set) but not installed")
        pytest.skip("chromium is not installed")
    return chromium


# Where the browser tests leave their screenshots, for a person to look at.
ARTEFACTS = Path(os.environ.get("WIRESPEED_TEST_ARTEFACTS", REPO / "test-artefacts"))
# Every SVG element Vega draws a mark as.
MARKS = "g.role-mark > path, g.role-mark > line, g.role-mark > text, g.role-mark > rect"


@contextmanager
def offline_page(path: Path, errors: list[str]):
    """`path` open in the system Chromium driven by Playwright (no browser download), every
    request but the file itself refused; console errors and page errors go to `errors`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
            page.goto(path.as_uri())
            yield page
        finally:
            browser.close()


def drawn_charts(page, charts: int) -> list[int]:
    """Once all `charts` charts are drawn, how many marks each has."""
    page.wait_for_function(f"document.querySelectorAll('.chart svg.marks').length === {charts}", timeout=30_000)
    return page.eval_on_selector_all(".chart", f"charts => charts.map(c => c.querySelectorAll({MARKS!r}).length)")


def timeline_bars(page) -> list[str]:
    """The geometry of every bar the timeline chart draws."""
    return page.locator(".chart:has(select) path[aria-roledescription='bar']").evaluate_all(
        "paths => paths.map(p => p.getAttribute('d'))"
    )


def timeline_path(page) -> list[str]:
    """The geometry of the critical path line drawn over the timeline."""
    return page.locator(".chart:has(select) g.mark-line path").evaluate_all("paths => paths.map(p => p.getAttribute('d'))")


def test_the_report_in_a_browser_shows_every_chart_with_tooltips_and_no_errors(nccl_report):
    """Playwright drives the system Chromium (no browser download), with every request but the
    file itself refused: no console error, marks in every chart, a tooltip on hover, a step
    selector that redraws the timeline and its critical path, a wheel that zooms it, and screenshots at 1400 and
    800 px wide in test-artefacts/."""
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with offline_page(nccl_report, errors) as page:
        drawn = drawn_charts(page, 8)
        assert len(drawn) == 8 and all(count > 0 for count in drawn), drawn
        page.locator("#chart-0 g.mark-rect path").first.hover()
        tooltip = page.wait_for_selector("#vg-tooltip-element.visible", timeout=10_000)
        assert "ms" in tooltip.inner_text() and "state" in tooltip.inner_text()
        page.mouse.move(0, 0)

        # The timeline opens on the typical step; picking another draws that step's stretches.
        select = page.locator(".chart select")
        assert select.count() == 1 and select.input_value() == "5"
        assert select.locator("option").all_inner_texts()[0].startswith("5 (typical)")
        opened, opened_path = timeline_bars(page), timeline_path(page)
        select.select_option("4")
        page.wait_for_function("document.querySelector('.chart:has(select) .role-title').textContent.startsWith('Step 4')")
        assert timeline_bars(page) != opened and len(timeline_bars(page)) > 0
        # Over each step, its critical path as one line.
        assert len(opened_path) == 1 and opened_path[0].count("L") > 10
        assert len(timeline_path(page)) == 1 and timeline_path(page) != opened_path

        # The wheel over the timeline zooms its time axis: fewer milliseconds span the chart.
        axis = ".chart:has(select) .role-axis[aria-label^='X-axis'] .role-axis-label text"
        labels = page.locator(axis).all_text_contents()
        page.locator(".chart:has(select) svg").hover()
        page.mouse.wheel(0, -400)
        page.wait_for_function(
            "([axis, before]) => [...document.querySelectorAll(axis)].map(t => t.textContent).join() !== before",
            arg=[axis, ",".join(labels)], timeout=10_000,
        )
        page.mouse.move(0, 0)
        page.screenshot(path=ARTEFACTS / "report-1400px.png", full_page=True)
        page.set_viewport_size({"width": 800, "height": 900})
        page.screenshot(path=ARTEFACTS / "report-800px.png", full_page=True)
    assert errors == []
    assert (ARTEFACTS / "report-1400px.png").stat().st_size > 10_000


def test_every_mark_of_every_chart_has_a_tooltip():
    """No chart draws a mark a reader cannot hover to read."""
    from pipelines.report import templates

    def units(spec):
        if "mark" in spec:
            yield spec
        for key in ("layer", "spec", "vconcat", "hconcat", "concat"):
            children = spec.get(key, [])
            for child in children if isinstance(children, list) else [children]:
                yield from units(child)

    for name, spec in templates.specs().items():
        for unit in units(spec):
            assert "tooltip" in unit.get("encoding", {}), (name, unit["mark"])


def test_the_verdict_leads_with_its_figures_as_tiles(nccl_report):
    html = nccl_report.read_text()
    # The trace does not record its line rate, and none was given: the tiles that need it say so.
    assert "<p class='verdict bad'>Communication-bound (line rate unknown)</p>" in html
    tiles = re.findall(r"<div class='label'>([^<]*)</div><div class='value'>([^<]*)</div>", html)
    assert dict(tiles) == {
        "exposed communication": "6.0%", "steps wait most for": "dp", "utilisation of the line rate": "unknown",
        "scaling factor now": "0.95", "at full line rate": "unknown",
    }


def test_chart_sizes_and_selector_options_are_filled_from_the_data():
    """What only the data knows (the steps on offer, the pixels per bar, a facet's columns) is
    filled into the kept spec; a name the spec lacks is refused."""
    from pipelines.report import templates

    rows = {"step_stretches": [{"step": 3, "rank": 0}], "critical_path_points": []}
    spec = templates.filled("step_timeline", rows, params={"step": {"value": 3, "options": [3, 1], "labels": ["3", "1"]}})
    (step,) = [p for p in spec["params"] if p["name"] == "step"]
    assert step["value"] == 3 and step["bind"]["options"] == [3, 1] and step["bind"]["input"] == "select"
    facets = templates.filled("step_breakdown", {"step_states": []}, bar_px=33, columns=2)
    assert facets["spec"]["width"] == {"step": 33} and facets["columns"] == 2
    with pytest.raises(ValueError, match="parameters"):
        templates.filled("step_timeline", rows, params={"rank": {"value": 0}})
    with pytest.raises(ValueError, match="no properties"):
        templates.filled("step_timeline", rows, columns=2)
    with pytest.raises(ValueError, match="not a step"):
        templates.filled("step_timeline", rows, bar_px=10)


def test_report_loads_nothing_from_the_network(nccl_report):
    html = nccl_report.read_text()
    scripts = re.findall(r"<script\b([^>]*)>", html)
    assert scripts and all("src" not in attributes for attributes in scripts)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_report_renders_offline_in_a_browser(nccl_report, tmp_path):
    dom = browser_dom(nccl_report, tmp_path / "profile")
    # Step breakdown, a typical step's timeline, exposure per parallel dimension, the critical
    # path's parts, bandwidth by size, waiting versus transfer, the what-if heatmap, scaling across
    # the job: each chart's element now holds an SVG Vega drew.
    charts = re.findall(r'id="chart-\d+"[^>]*>\s*<svg[^>]*class="marks"', dom)
    assert len(charts) == len(re.findall(r"id='chart-\d+'", nccl_report.read_text())) == 8
    assert "Exposed communication takes" in dom and "Is the network the bottleneck?" in dom
    # The per-dimension section names the run's one data-parallel group.
    assert "Which parallel dimension waits?" in dom and re.search(r"<td>default_pg</td>\s*<td>dp</td>", dom)


def chart_specs(page) -> list[dict]:
    """The Vega-Lite spec of each chart on a report page, rows included."""
    return [json.loads(spec) for spec in re.findall(r'^vegaEmbed\("#chart-\d+", (.*), \{mode: ', page.read_text(), re.M)]


def test_every_chart_is_valid_vega_lite(nccl_report):
    """The kept specs are checked when built; filled with a run's rows, each is still valid."""
    from altair.utils.schemapi import validate_jsonschema
    from altair.vegalite.v6.schema.core import load_schema

    specs = chart_specs(nccl_report)
    assert len(specs) == 8
    for spec in specs:
        validate_jsonschema(spec, load_schema())
        assert spec["datasets"] and all(spec["datasets"].values())


def test_a_report_imports_no_altair_once_the_chart_specs_are_kept(nccl_report, tmp_path):
    """Charts come from kept specs; a report written in a fresh process equals the one before."""
    again = tmp_path / "again.html"
    script = (
        "import sys; from pathlib import Path\n"
        "from pipelines.report import report_run\n"
        "from pipelines.settings import Settings\n"
        "from pipelines.warehouse.store import Warehouse\n"
        f"report_run(Warehouse({str(nccl_report.parent.parent)!r}), Settings(), 'nccl_data', Path({str(again)!r}))\n"
        "assert 'altair' not in sys.modules, 'imported Altair'\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert chart_specs(again) == chart_specs(nccl_report)


def test_the_chart_specs_are_built_once_and_kept(tmp_path, monkeypatch):
    from pipelines.report import charts, templates

    monkeypatch.setenv("WIRESPEED_CACHE", str(tmp_path / "cache"))
    templates.specs.cache_clear()
    try:
        built = templates.specs()
        (kept,) = (tmp_path / "cache").iterdir()
        assert set(built) == set(charts.CHARTS) and json.loads(kept.read_text(encoding="utf-8")) == built
        kept.write_text(json.dumps({"step_timeline": {"data": {"name": "step_stretches"}}}), encoding="utf-8")
        templates.specs.cache_clear()
        # A later process reads the kept file instead of building, and fills what it names.
        assert templates.filled("step_timeline", {"step_stretches": [{"rank": 0}]})["datasets"] == {"step_stretches": [{"rank": 0}]}
        with pytest.raises(ValueError, match="draws from"):
            templates.filled("step_timeline", {"other": []})
    finally:
        templates.specs.cache_clear()


def test_trace_text_is_escaped(tmp_path):
    """Names from a trace cannot run script in the report (checked in a real browser)."""
    attack = "<script>document.title='pwned'</script><img src=x onerror=\"document.body.dataset.pwned=1\">"
    trace = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 1, "backend": "gloo"},
        "host_name": attack,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1.7e15, "dur": 1000},
            {"ph": "X", "cat": "cpu_op", "name": attack, "pid": 1, "tid": 1, "ts": 1.7e15 + 10, "dur": 500},
            {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 1.7e15 + 100, "dur": 600},
            {"ph": "X", "cat": "cpu_op", "name": attack, "pid": 1, "tid": 1, "ts": "not a time", "dur": 5},
        ],
    }
    folder = tmp_path / "attack"
    folder.mkdir()
    (folder / "rank0.json").write_text(json.dumps(trace))
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    run_id = ingest_directly(store, folder, "<b>run</b>")
    page = report_run(store, Settings(), run_id)
    html = page.read_text()
    assert attack not in html and "&lt;script&gt;" in html and "&lt;b&gt;run&lt;/b&gt;" in html
    dom = browser_dom(page, tmp_path / "profile")
    # Had the markup been injected, the browser would have run it: the title would read "pwned",
    # the body would carry data-pwned, and an <img> element would sit in the page.
    markup = re.sub(r"<script\b.*?</script>", "", dom, flags=re.S)  # our own scripts (Vega) aside
    assert "<title>wirespeed report: &lt;b&gt;run&lt;/b&gt;</title>" in markup
    assert "data-pwned" not in markup and "<img" not in markup and "<b>run</b>" not in markup
    assert "&lt;script&gt;document.title" in markup  # shown as text, in the issues table


def test_report_says_when_no_communication_was_found(tmp_path):
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    run_id = ingest_directly(store, TRACES / "hta_single_rank_of_multirank" / "ns_resolution_rank0_of1.pt.trace.json.gz")
    html = report_run(store, Settings(), run_id).read_text()
    markup = re.sub(r"<script\b.*?</script>", "", html, flags=re.S)
    assert "No communication was found in this run" in markup and "NaN" not in markup
    # Every empty part says why it is empty, never a bare "None."
    assert "None." not in markup and "No collective was found in the traces." in markup
    assert "communication_found</td><td class='fail'>failed" in html


def test_the_vega_bundle_is_built_once_and_kept(tmp_path, monkeypatch):
    """A report inlines Vega; it is built once per vl-convert version and then read back."""
    from pipelines.report import page

    monkeypatch.setenv("WIRESPEED_CACHE", str(tmp_path / "cache"))
    page.vega_bundle.cache_clear()
    try:
        built = page.vega_bundle()
        (kept,) = (tmp_path / "cache").iterdir()
        assert "vegaEmbed" in built and kept.read_text(encoding="utf-8") == built
        kept.write_text("// kept", encoding="utf-8")
        page.vega_bundle.cache_clear()
        assert page.vega_bundle() == "// kept"  # a later process reads it instead of building
    finally:
        page.vega_bundle.cache_clear()


def test_the_throughput_chart_shows_the_interface_that_carried_the_traffic(tmp_path):
    """The manifest names the default-route NIC, which sat idle while the job talked over another:
    the chart draws the one that carried traffic rather than an empty line."""
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "samples").mkdir()
    for rank in (0, 1):
        shutil.copy(TRACES / "hta_sampled_2rank" / f"sampled_rank-{rank}.json.gz", run / "traces" / f"rank{rank}.pt.trace.json.gz")
    samples = ["t_ns,host,interface,rx_bytes,tx_bytes"]
    for tick in range(10):
        t_ns = 1_700_000_000_000_000_000 + tick * 100_000_000
        samples += [f"{t_ns},host0,eth0,5000,5000", f"{t_ns},host0,ens5,{tick * 10_000_000},{tick * 12_000_000}"]
    (run / "samples" / "net.host0.csv").write_text("\n".join(samples) + "\n")
    manifest = {"run_id": "run", "world_size": 2, "link_gbps": 10.0, "link_interface": "eth0", "link_source": "manifest"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    page = report_run(store, Settings(), ingest_directly(store, run, "run"))
    (throughput,) = [spec for spec in chart_specs(page) if "throughput_over_time" in spec["datasets"]]
    series = {row["series"] for row in throughput["datasets"]["throughput_over_time"]}
    assert "counters: ens5" in series and "counters: eth0" not in series


def test_the_fleet_report_in_a_browser_draws_each_job_with_no_errors(tmp_path):
    """Two runs of one job and one of another: the fleet report (the Dagster asset's own code)
    lists both jobs, draws their trends, and loads in Chromium with no console error."""
    from pipelines.defs.resources import WarehouseResource
    from pipelines.defs.rollups.assets import fleet_report
    from pipelines.warehouse import rollups

    landing = tmp_path / "landing"
    for index, (name, job) in enumerate([("a1", "alpha"), ("a2", "alpha"), ("b1", "beta")]):
        shutil.copytree(TRACES / "hta_sampled_2rank", landing / name / "traces")
        started_ns = 1_700_000_000_000_000_000 + index * 3_600_000_000_000  # an hour apart
        (landing / name / "manifest.json").write_text(json.dumps({"run_id": name, "job": job, "world_size": 2, "started_ns": started_ns}))
    store = Warehouse(tmp_path / "warehouse")
    store.ensure()
    for name in ("a1", "a2", "b1"):
        ingest_directly(store, landing / name, name)
    rollups.publish(store, Settings())
    result = dg_materialize(fleet_report, WarehouseResource(root=str(store.root), landing=str(landing)))
    page = Path(result["path"])
    html = page.read_text()
    assert "<td>alpha</td><td>2</td>" in html and "<td>beta</td><td>1</td>" in html
    errors: list[str] = []
    with offline_page(page, errors) as view:
        drawn = drawn_charts(view, 2)
        assert len(drawn) == 2 and all(count > 0 for count in drawn), drawn
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        view.screenshot(path=ARTEFACTS / "fleet-1400px.png", full_page=True)
    assert errors == []


def dg_materialize(asset, resource) -> dict:
    """Materialise one unpartitioned asset in an ephemeral instance; its materialisation's metadata."""
    import dagster as dg

    outcome = dg.materialize([asset], resources={"warehouse": resource}, instance=dg.DagsterInstance.ephemeral())
    (event,) = outcome.get_asset_materialization_events()
    return {key: value.value for key, value in event.materialization.metadata.items()}


def test_a_long_critical_path_is_drawn_through_its_rank_changes_and_longest_dependencies(nccl_report):
    """Capped below its length, the timeline's path keeps its two ends, every point where it changes
    rank and, of the rest, those before its longest dependencies; uncapped, every point, in order."""
    from pipelines.warehouse import sql
    from pipelines.warehouse.store import TABLES, open_version

    store = Warehouse(nccl_report.parent.parent)
    con = open_version(store.published("nccl_data"), Settings(), "nccl_data", TABLES)
    try:
        (step,) = con.execute("SELECT any_value(step) FROM step_dependencies WHERE critical_path_position IS NOT NULL").fetchall()[0]

        def points(cap: int) -> list[dict]:
            sql.set_variables(con, timeline_steps=[step], max_stretches_per_step=cap)
            return sql.report_rows(con, "critical_path_points")

        whole, capped = points(10**9), points(5)
    finally:
        con.close()
    assert [p["position"] for p in whole] == list(range(1, len(whole) + 1)) and len(whole) > 20
    turns = [p["position"] for i, p in enumerate(whole)
             if p["rank"] != whole[max(i - 1, 0)]["rank"] or p["rank"] != whole[min(i + 1, len(whole) - 1)]["rank"]]
    longest = sorted(whole, key=lambda p: (-p["next_us"], p["position"]))[:5]
    ends = {whole[0]["position"], whole[-1]["position"]}
    assert [p["position"] for p in capped] == sorted(ends | {*turns, *(p["position"] for p in longest)})
