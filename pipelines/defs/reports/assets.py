"""The per-run HTML report, rewritten whenever the run's analysis changes."""

from pathlib import Path

import dagster as dg

from pipelines import stages
from pipelines.defs.partitions import runs_partitions
from pipelines.defs.resources import WarehouseResource
from pipelines.warehouse.store import ANALYSIS_TABLES

SEVERITY = {"warn": dg.AssetCheckSeverity.WARN, "error": dg.AssetCheckSeverity.ERROR}


@dg.asset(
    partitions_def=runs_partitions,
    group_name="reports",
    kinds={"html"},
    deps=list(ANALYSIS_TABLES),
    check_specs=[dg.AssetCheckSpec(
        "no_regression", asset="run_report",
        description="The run is no worse than its job's baseline in step time, exposed or waiting share, or the bus "
                    "bandwidth of any collective kind (sql/regressions.sql); severity from wirespeed.toml [regressions].",
    )],
)
def run_report(context: dg.AssetExecutionContext, warehouse: WarehouseResource):
    """A standalone HTML report of the run (charts inlined, works offline), with its verdict, so
    that the asset catalog answers the question without opening the file; and whether the run
    regressed against its job's baseline."""
    store, settings = warehouse.open(), warehouse.settings()
    path = stages.report(store, settings, context.partition_key)
    verdict, compared = stages.judgement(store, settings, context.partition_key)
    yield dg.MaterializeResult(metadata=report_metadata(verdict, path))
    yield dg.AssetCheckResult(check_name="no_regression", **regression_check(compared, settings.regression_severity))


# The verdict's figures as the asset catalog shows them: column, label with its unit, scale, and
# the digits the report's tiles show.
FIGURES = (
    ("exposed_comm_share", "exposed communication (% of step time)", 100, 1),
    ("utilization", "utilisation of the line rate (%)", 100, 0),
    ("estimated_sf", "scaling factor now, estimated (1 = ideal)", 1, 2),
    ("full_rate_sf", "scaling factor at full line rate (1 = ideal)", 1, 2),
)


def report_metadata(verdict: dict, path: Path) -> dict:
    """What a report's materialisation carries: the verdict, its figures as a person reads them
    (numbers still, which the catalog plots across runs), their exact values as the verdict table
    holds them, and where the file is."""
    exact = {column: float(verdict[column]) for column, *_ in FIGURES if verdict[column] is not None}
    shown = {label: dg.MetadataValue.float(round(exact[column] * scale, digits))
             for column, label, scale, digits in FIGURES if column in exact}
    return {
        "verdict": dg.MetadataValue.md(f"**{verdict['bottleneck']}**. {verdict['explanation']}"),
        **shown,
        "exact figures (verdict table)": dg.MetadataValue.json(exact),
        "path": dg.MetadataValue.path(str(path)),
        "url": dg.MetadataValue.url(path.as_uri()),
    }


def regression_check(compared: list[dict], severity: str) -> dict:
    """The `no_regression` check's result, from the run's rows of sql/regressions.sql."""
    regressed = [row["summary"] for row in compared if row["regressed"]]
    if not compared:
        description = "no baseline: no earlier run of the same job and world size"
    elif regressed:
        description = "regressed: " + "; ".join(regressed)
    else:
        description = f"no regression against {compared[0]['baseline_runs']} baseline run(s)"
    return {
        "passed": not regressed,
        "severity": SEVERITY[severity],
        "description": description,
        "metadata": {"regressed": len(regressed), "measures compared": len(compared)},
    }
