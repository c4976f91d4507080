"""Assemble a standalone HTML page: text, tables and charts (Vega-Lite specs), with Vega inlined once.

Everything that comes from a trace (kernel names, host names, file paths, run ids) is escaped
before it reaches the page: HTML-escaped in markup, and JSON inside scripts has `<` escaped so
no string can close the script element. The page loads nothing from the network.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from functools import cache

import orjson

import importlib.metadata

from pipelines.report import templates
from pipelines.warehouse.cache import kept


@cache
def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script that defines `window.vegaEmbed`.

    Building it takes about a second, and importing vl-convert a tenth, so it is built once per
    vl-convert version and kept.
    """
    def build() -> str:
        import vl_convert

        return vl_convert.javascript_bundle()

    return kept(f"vega-bundle-vl-convert-{importlib.metadata.version('vl-convert-python')}.js", build)


def script_json(value) -> str:
    """JSON safe to place inside a <script> element (orjson: a large chart's rows in a tenth of
    the time; a value that is not a number, NaN, becomes null)."""
    text = orjson.dumps(value, default=str).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@dataclass
class Section:
    title: str
    body: str  # already-safe HTML


def text(value) -> str:
    return html.escape("" if value is None else str(value))


def paragraph(message: str) -> str:
    return f"<p>{text(message)}</p>"


def table(rows: list[dict], formats: dict[str, str] | None = None, empty: str = "") -> str:
    """An HTML table of rows (dicts), every cell escaped; numbers formatted by `formats`. Without
    rows, the sentence `empty` says why (and nothing is shown when it is blank)."""
    if not rows:
        return f"<p class='muted'>{text(empty)}</p>" if empty else ""
    formats = formats or {}
    columns = list(rows[0])
    head = "".join(f"<th>{text(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for column in columns:
            value = row[column]
            if value is not None and column in formats:
                value = format(value, formats[column])
            cells.append(f"<td>{text(value)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Page:
    def __init__(self, title: str, subtitle: str = ""):
        self.title = title
        self.subtitle = subtitle
        self.sections: list[Section] = []
        self.charts: list[tuple[str, dict]] = []

    def add(self, title: str, body: str) -> None:
        self.sections.append(Section(title, body))

    def chart(self, name: str, datasets: dict[str, list[dict]], **filling) -> str:
        """Place chart `name` (pipelines/report/charts.py) drawn from `datasets` and filled in with
        `filling` (templates.filled); returns the HTML element it renders into."""
        element = f"chart-{len(self.charts)}"
        self.charts.append((element, templates.filled(name, datasets, **filling)))
        return f"<div class='chart' id='{element}'></div>"

    def render(self) -> str:
        sections = "\n".join(f"<section><h2>{text(s.title)}</h2>\n{s.body}\n</section>" for s in self.sections)
        embeds = "\n".join(
            f"vegaEmbed({script_json('#' + element)}, {script_json(spec)}, "
            "{mode: 'vega-lite', actions: false, renderer: 'svg'}).catch(console.error);"
            for element, spec in self.charts
        )
        return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:">
<title>{text(self.title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1100px; color: #222; }}
h1 {{ font-size: 1.6em; }} h2 {{ font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }}
table {{ border-collapse: collapse; font-size: .9em; display: block; overflow-x: auto; max-width: 100%; }} td, th {{ border: 1px solid #ddd; padding: .25em .6em; text-align: left; }}
th {{ background: #f5f5f5; }} .muted {{ color: #777; }} .headline {{ font-size: 1.15em; }}
.pass {{ color: #009E73; }} .fail {{ color: #D55E00; }} .chart {{ margin: 1em 0; overflow-x: auto; max-width: 100%; }}
.subtitle {{ color: #555; margin-top: -.5em; }}
.verdict {{ font-size: 1.7em; font-weight: 700; margin: .3em 0; }}
.verdict.bad {{ color: #D55E00; }} .verdict.good {{ color: #009E73; }} .verdict.unknown {{ color: #555; }}
.tiles {{ display: flex; flex-wrap: wrap; gap: .8em; margin: 1.2em 0; }}
.tile {{ flex: 1 1 170px; border: 1px solid #ddd; border-radius: 6px; padding: .6em .9em; background: #fafafa; }}
.tile .label {{ font-size: .85em; color: #555; }} .tile .value {{ font-size: 2em; font-weight: 700; margin: .1em 0; }}
.tile .sub {{ font-size: .8em; color: #555; }} details {{ margin: .8em 0; }} summary {{ cursor: pointer; color: #0072B2; }}
.vega-bind {{ margin: .5em 0; }} .vega-bind select {{ font-size: 1em; }}
</style>
<script>{vega_bundle()}</script>
</head>
<body>
<h1>{text(self.title)}</h1>
{f"<p class='subtitle'>{text(self.subtitle)}</p>" if self.subtitle else ""}
{sections}
<script>
{embeds}
</script>
</body>
</html>
"""
