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

from pipelines.cache import kept

CHARTS_MODULE = Path(__file__).with_name("charts.py")


@cache
def specs() -> dict[str, dict]:
    """Every chart's spec by name, read from the cache folder (built and kept first if missing)."""
    digest = hashlib.sha256(CHARTS_MODULE.read_bytes() + importlib.metadata.version("altair").encode()).hexdigest()[:20]
    return json.loads(kept(f"charts-{digest}.json", _build))


def _build() -> str:
    from pipelines.report import charts

    return json.dumps(charts.specs())


def filled(name: str, datasets: dict[str, list[dict]]) -> dict:
    """Chart `name`'s spec with the rows of each dataset it draws from."""
    spec = specs()[name]
    wanted = datasets_of(spec)
    if set(datasets) != wanted:
        raise ValueError(f"chart {name!r} draws from {sorted(wanted)}, given {sorted(datasets)}")
    return {**spec, "datasets": datasets}


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
