"""The charts' Vega-Lite specs, built with Altair once per version of the charts and kept.

Building them imports Altair and checks each spec against the schema, most of a second; a report
only fills a kept spec's named datasets with its query rows, so it never imports Altair. The
kept file is named by a digest of pipelines/report/charts.py and Altair's version, so a change
to either builds anew.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from functools import cache
from pathlib import Path

from pipelines.warehouse.cache import kept

CHARTS_MODULE = Path(__file__).with_name("charts.py")


@cache
def specs() -> dict[str, dict]:
    """Every chart's spec by name, read from the cache folder (built and kept first if missing)."""
    digest = hashlib.sha256(CHARTS_MODULE.read_bytes() + importlib.metadata.version("altair").encode()).hexdigest()[:20]
    return json.loads(kept(f"charts-{digest}.json", _build))


def _build() -> str:
    from pipelines.report import charts

    return json.dumps(charts.specs())


def filled(
    name: str, datasets: dict[str, list[dict]], params: dict[str, dict] | None = None, bar_px: int | None = None, **properties
) -> dict:
    """Chart `name`'s spec with the rows of each dataset it draws from, and what only the data knows.

    `params` fills the chart's parameters: by name, a `value` and the rest for its input binding
    (a select's `options` and `labels`). `bar_px` sets the pixels per step of a chart whose width
    is a step (or whose facets' is). `properties` replace top-level ones the spec has (a facet's
    `columns`).
    """
    spec = specs()[name]
    wanted = datasets_of(spec)
    if set(datasets) != wanted:
        raise ValueError(f"chart {name!r} draws from {sorted(wanted)}, given {sorted(datasets)}")
    unknown = set(properties) - set(spec)
    if unknown:
        raise ValueError(f"chart {name!r} has no properties {sorted(unknown)}")
    declared = {param["name"]: param for param in spec.get("params", [])}
    if set(params or {}) - set(declared):
        raise ValueError(f"chart {name!r} has parameters {sorted(declared)}, given {sorted(params)}")
    spec = {**spec, **properties, "datasets": datasets}
    if bar_px is not None:
        spec = _width_step(spec, bar_px)
    if params:
        spec["params"] = [
            {**param, "value": params[pname]["value"], "bind": {**param["bind"], **{k: v for k, v in params[pname].items() if k != "value"}}}
            if pname in params else param
            for pname, param in declared.items()
        ]
    return spec


def _width_step(spec: dict, px: int) -> dict:
    """The spec with the step of its width (its own or its facets' inner chart's) set to `px`."""
    if isinstance(spec.get("width"), dict) and "step" in spec["width"]:
        return {**spec, "width": {"step": px}}
    if "spec" in spec:
        return {**spec, "spec": _width_step(spec["spec"], px)}
    raise ValueError("the chart's width is not a step")


def datasets_of(spec) -> set[str]:
    """The names of the datasets a spec draws from (`"data": {"name": ...}` anywhere in it)."""
    names, pending = set(), [spec]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if isinstance(node.get("data"), dict) and "name" in node["data"]:
                names.add(node["data"]["name"])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return names
