"""The report's Altair charts, each over named datasets that the report fills from its queries.

No chart's spec depends on its data: sizes are Vega-Lite steps (so many pixels per step, rank or
size range) or fixed, filters and derived fields are Vega-Lite transforms, and what only the
data knows (the steps a selector offers, a facet's columns) is a parameter the report fills in.
So the specs are built once per version of this module and kept (pipelines/report/templates.py),
and a report fills them in without Altair. Every dataset is one query of `sql/report/`, already
aggregated (never raw events). Every mark has a tooltip.
"""

from __future__ import annotations

import json

import altair as alt

# Okabe and Ito's palette, told apart with every common colour-vision deficiency: the colours
# of every categorical scale.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
BLUE, ORANGE, GREEN, PURPLE, SKY, VERMILLION = PALETTE[:6]

# One colour per state, the same in every chart. Exposed communication (the thing to shrink) has
# the one warm colour; communication hidden under compute is a light shade of compute's.
STATES = ["compute", "overlapped communication", "exposed communication", "other (copies, fills)", "idle"]
COLOURS = [BLUE, SKY, VERMILLION, GREEN, "#DDDDDD"]
_SCALE = alt.Scale(domain=STATES, range=COLOURS)

# Pixels per step (or size range) of the charts with one bar per step.
STEP_PX = 16

# The what-if heatmap outlines the cells whose scaling factor reaches this.
WHATIF_TARGET = 0.95


def _data(name: str) -> alt.NamedData:
    return alt.NamedData(name=name)


def _step_states() -> alt.Chart:
    """Each state's milliseconds, with its position in the stack."""
    return alt.Chart(_data("step_states")).transform_calculate(state_order=f"indexof({json.dumps(STATES)}, datum.state)")


_STATE_TOOLTIP = [alt.Tooltip("rank:O"), alt.Tooltip("step:O"), alt.Tooltip("state:N"), alt.Tooltip("ms:Q", format=".3f", title="ms")]


def _state_bars(x: alt.X, y: alt.Y) -> alt.Chart:
    """Bars stacked by state, in the same order and colours everywhere."""
    return _step_states().mark_bar().encode(
        x=x, y=y, color=alt.Color("state:N", scale=_SCALE, title=None), order=alt.Order("state_order:Q"), tooltip=_STATE_TOOLTIP
    )


def step_breakdown_chart() -> alt.FacetChart:
    """Stacked bars: for each rank and step, milliseconds of compute, communication, other, idle."""
    bars = _state_bars(alt.X("step:O", title="step"), alt.Y("ms:Q", title="milliseconds", stack="zero"))
    return bars.properties(width=alt.Step(STEP_PX), height=180).facet(
        facet=alt.Facet("rank:O", title="rank"), columns=4
    ).properties(title="Where each step's time went, per rank")


def rank_breakdown_chart() -> alt.Chart:
    """Stacked bars, one per rank, over all steps: for runs with too many ranks to facet."""
    bars = _state_bars(alt.X("sum(ms):Q", title="milliseconds over all steps", stack="zero"), alt.Y("rank:O", title="rank"))
    return bars.properties(width=640, height=alt.Step(10), title="Where the steps' time went, per rank")


def _stacked_per_step(data: str, value: str, value_title: str, value_tip: str, part: str, part_title: str, title: str,
                      *more: alt.Tooltip) -> alt.Chart:
    """Stacked bars, one per step: an average rank's milliseconds (`value`) in each `part`."""
    return (
        alt.Chart(_data(data))
        .mark_bar()
        .encode(
            x=alt.X("step:O", title="step"),
            y=alt.Y(f"{value}:Q", title=value_title, stack="zero"),
            color=alt.Color(f"{part}:N", title=part_title),
            tooltip=[alt.Tooltip("step:O"), alt.Tooltip(f"{part}:N"), alt.Tooltip(f"{value}:Q", format=".3f", title=value_tip),
                     *more],
        )
        .properties(width=alt.Step(STEP_PX), height=180, title=title)
    )


def dimension_steps_chart() -> alt.Chart:
    """For each step, an average rank's exposed milliseconds per parallel dimension."""
    return _stacked_per_step("dimension_steps", "exposed_ms", "exposed ms (mean over ranks)", "exposed ms", "dimension",
                             "dimension (link)", "Which parallel dimension's communication each step waited for")


def critical_path_steps_chart() -> alt.Chart:
    """For each step, an average rank's milliseconds on its critical path, by part."""
    return _stacked_per_step("critical_path_steps", "path_ms", "ms on the critical path (mean over ranks)", "ms on the path",
                             "part", "part", "What each step's critical path is made of", alt.Tooltip("ranks:Q", title="ranks"))


def step_timeline_chart() -> alt.LayerChart:
    """A Gantt of one step on every rank: when compute ran and when communication was exposed, with
    the step's critical path drawn over it as a line from rank to rank.

    The step is picked from a list (its options filled by the report); the time axis zooms with
    the wheel, pans by dragging and resets on a double click.
    """
    step = alt.param(name="step", value=0, bind=alt.binding_select(options=[0], name="step "))
    zoom = alt.selection_interval(name="zoom", bind="scales", encodings=["x"])
    rank = alt.Y("rank:O", title="rank")
    stretches = (
        alt.Chart(_data("step_stretches"))
        .mark_bar(height={"band": 0.8})
        .encode(
            y=rank,
            x=alt.X("start_ms:Q", title="ms since the start of the step on that rank"),
            x2="end_ms:Q",
            color=alt.Color("state:N", scale=_SCALE, title=None),
            tooltip=[
                alt.Tooltip("step:O"),
                alt.Tooltip("rank:O"),
                alt.Tooltip("state:N"),
                alt.Tooltip("start_ms:Q", format=".3f"),
                alt.Tooltip("dur_us:Q", format=".1f", title="duration (us)"),
            ],
        )
        .add_params(step, zoom)
        .transform_filter(alt.datum.step == step)
    )
    path = (
        alt.Chart(_data("critical_path_points"))
        .mark_line(color="black", strokeWidth=1.5, point=alt.OverlayMarkDef(color="black", size=12))
        .encode(
            y=rank,
            x=alt.X("at_ms:Q"),
            order="position:Q",
            tooltip=[
                alt.Tooltip("rank:O"),
                alt.Tooltip("node:N", title="on the critical path"),
                alt.Tooltip("at_ms:Q", format=".3f"),
                alt.Tooltip("next_dependency:N", title="then"),
                alt.Tooltip("next_us:Q", format=".1f", title="for (us)"),
            ],
        )
        .transform_filter(alt.datum.step == step)
    )
    return alt.layer(stretches, path).properties(
        width=760, height=alt.Step(24),
        title=alt.TitleParams(text=alt.ExprRef(expr="'Step ' + step + ' on every rank, idle left blank'")),
    )


def _line_rates(data: str, *fields: str) -> alt.Chart:
    """A dashed rule at each distinct known line rate in `data`."""
    return (
        alt.Chart(_data(data))
        .transform_filter("isValid(datum.link_gbps)")
        .transform_aggregate(rows="count()", groupby=["link_gbps", *fields])
        .mark_rule(strokeDash=[6, 4], color="#333")
    )


def bandwidth_by_size_chart() -> alt.LayerChart:
    """Bus bandwidth of each collective's transfer against its size range, with the line rate drawn in.

    One column per power-of-two size range that occurs, ops side by side within it: a log axis
    would leave decades empty between the few sizes a model uses.
    """
    dots = (
        alt.Chart(_data("bandwidth_by_size"))
        .mark_point(filled=True, opacity=0.7)
        .encode(
            x=alt.X("size_from:O", sort=alt.EncodingSortField("size_log2", op="min"), title="message size, from",
                    axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("op:N"),
            y=alt.Y("busbw_gbps:Q", title="bus bandwidth of the transfer (Gbit/s)"),
            color=alt.Color("op:N", title="op"),
            shape=alt.Shape("scope:N", title="scope"),
            tooltip=["op:N", "scope:N", alt.Tooltip("bytes:Q", format=","), alt.Tooltip("busbw_gbps:Q", format=".3f")],
        )
    )
    rule = _line_rates("bandwidth_by_size", "scope").encode(
        y="link_gbps:Q", tooltip=[alt.Tooltip("link_gbps:Q", title="line rate (Gbit/s)"), "scope:N"]
    )
    return alt.layer(dots, rule).properties(
        width=alt.Step(2 * STEP_PX), height=300, title="How close each collective came to the line rate (dashed)"
    )


def throughput_chart() -> alt.LayerChart:
    """Throughput over time: what the NIC counters saw and what the collectives had to move.

    Windows in which the collectives moved data are shaded: the communication phases.
    """
    shading = (
        alt.Chart(_data("throughput_over_time"))
        .transform_filter("datum.source === 'collectives' && datum.gbps > 0")
        .transform_aggregate(hosts="count()", groupby=["t_s", "t_end_s"])
        .mark_rect(color=ORANGE, opacity=0.15)
        .encode(
            x="t_s:Q",
            x2="t_end_s:Q",
            tooltip=[alt.Tooltip("t_s:Q", format=".2f", title="communicating from (s)"), alt.Tooltip("t_end_s:Q", format=".2f", title="to (s)")],
        )
    )
    lines = (
        alt.Chart(_data("throughput_over_time"))
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("t_s:Q", title="seconds since the first window"),
            y=alt.Y("gbps:Q", title="Gbit/s (busier direction)"),
            color=alt.Color("series:N", title=None),
            strokeDash=alt.StrokeDash("host:N", title="host"),
            tooltip=["host:N", "series:N", alt.Tooltip("t_s:Q", format=".2f"), alt.Tooltip("gbps:Q", format=".3f")],
        )
    )
    rule = _line_rates("throughput_over_time").encode(y="link_gbps:Q", tooltip=[alt.Tooltip("link_gbps:Q", title="line rate (Gbit/s)")])
    return alt.layer(shading, lines, rule).properties(
        width=760, height=260, title="Network throughput over time (communication phases shaded, line rate dashed)"
    )


def wait_vs_transfer_chart() -> alt.Chart:
    """Per step, exposed communication that was waiting for other ranks versus moving data."""
    return (
        alt.Chart(_data("wait_vs_transfer"))
        .mark_bar()
        .encode(
            x=alt.X("step:O", title="step"),
            y=alt.Y("ms:Q", title="exposed communication, ms over all ranks", stack="zero"),
            color=alt.Color(
                "part:N", title=None, scale=alt.Scale(domain=["waiting for other ranks", "transfer"], range=[PURPLE, VERMILLION])
            ),
            tooltip=["step:O", "part:N", alt.Tooltip("ms:Q", format=".3f")],
        )
        .properties(width=alt.Step(STEP_PX), height=220, title="Exposed communication: waiting or moving data?")
    )


def whatif_heatmap() -> alt.LayerChart:
    """The what-if scaling factor over line rate and compression; cells reaching the target are outlined."""
    base = (
        alt.Chart(_data("whatif_grid"))
        .transform_calculate(reaches_target=f"datum.scaling_factor >= {WHATIF_TARGET}")
        .encode(
            x=alt.X("bandwidth_gbps:O", title="line rate (Gbit/s)"),
            y=alt.Y("compression:O", title="compression ratio", sort="descending"),
        )
    )
    tooltip = [
        alt.Tooltip("bandwidth_gbps:Q", title="Gbit/s"),
        alt.Tooltip("compression:Q"),
        alt.Tooltip("scaling_factor:Q", format=".3f"),
        alt.Tooltip("exposed_ms:Q", format=".3f", title="exposed ms per step"),
    ]
    cells = base.mark_rect(stroke="#000").encode(
        color=alt.Color("scaling_factor:Q", title="scaling factor", scale=alt.Scale(domain=[0, 1], scheme="viridis")),
        strokeWidth=alt.condition(alt.datum.reaches_target, alt.value(3), alt.value(0)),
        tooltip=tooltip,
    )
    labels = base.mark_text(fontSize=11).encode(
        text=alt.Text("scaling_factor:Q", format=".2f"),
        color=alt.condition("datum.scaling_factor < 0.6", alt.value("white"), alt.value("black")),
        tooltip=tooltip,
    )
    return alt.layer(cells, labels).properties(
        width=alt.Step(4 * STEP_PX), height=alt.Step(2 * STEP_PX),
        title=f"Predicted scaling factor at full line rate (outlined: at least {WHATIF_TARGET:g})",
    )


def _scaling_lines(data: str, lines: alt.Color, y_title: str, title: str) -> alt.Chart:
    """Scaling factor against ranks (log 2), a line per value of `lines`."""
    return (
        alt.Chart(_data(data))
        .mark_line(point=True)
        .encode(
            x=alt.X("ranks:Q", title="ranks", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("sf:Q", title=y_title, scale=alt.Scale(domain=[0, 1.05])),
            color=lines,
            tooltip=[lines.shorthand, "run_id:N", "ranks:Q", alt.Tooltip("sf:Q", format=".3f")],
        )
        .properties(width=520, height=240, title=title)
    )


def job_scaling_chart() -> alt.Chart:
    """Scaling factor against ranks for the runs of one job: measured, predicted, estimated."""
    return _scaling_lines("job_scaling", alt.Color("kind:N", title=None), "scaling factor",
                          "Scaling factor of this job's runs: measured, predicted and estimated")


def nccl_links_chart() -> alt.FacetChart:
    """A rank-by-rank matrix per communicator, coloured by the transport the link uses."""
    return (
        alt.Chart(_data("nccl_links"))
        .mark_rect()
        .encode(
            x=alt.X("to_rank:O", title="to rank"),
            y=alt.Y("from_rank:O", title="from rank"),
            color=alt.Color("transport:N", title="transport"),
            tooltip=["comm:N", "from_rank:O", "to_rank:O", "transport:N", "channels:Q"],
        )
        .properties(width=220, height=220)
        .facet(facet=alt.Facet("comm:N", title="communicator"), columns=3)
        .resolve_scale(x="independent", y="independent")
        .properties(title="Who talks to whom, over what (NCCL connection lines)")
    )


def nccl_call_mix_chart() -> alt.Chart:
    """Logged NCCL calls by op and power-of-two size range."""
    return (
        alt.Chart(_data("nccl_call_mix"))
        .mark_bar()
        .encode(
            x=alt.X("size_from:N", title="message size from", sort=alt.SortField("size_log2")),
            y=alt.Y("calls:Q", title="calls"),
            color=alt.Color("op:N", title="op"),
            tooltip=["op:N", "size_from:N", "calls:Q", alt.Tooltip("bytes:Q", format=",")],
        )
        .properties(width=alt.Step(3 * STEP_PX), height=220, title="The mix of logged NCCL calls")
    )


def nccl_tests_chart() -> alt.Chart:
    """nccl-tests bus bandwidth against message size."""
    return (
        alt.Chart(_data("nccl_tests"))
        .mark_line(point=True)
        .encode(
            x=alt.X("size_bytes:Q", scale=alt.Scale(type="log"), title="size (bytes)"),
            y=alt.Y("busbw_gbps:Q", title="bus bandwidth (Gbit/s)"),
            color=alt.Color("placement:N", title=None),
            detail="source:N",
            tooltip=["source:N", "placement:N", alt.Tooltip("size_bytes:Q", format=","), alt.Tooltip("busbw_gbps:Q", format=".2f")],
        )
        .properties(width=520, height=220, title="nccl-tests: what the cluster's links can do")
    )


def _regressed_shape(usual: str) -> alt.Shape:
    """A run that regressed against its job's baseline is a cross; the others keep `usual`."""
    return alt.Shape("has_regressed:N", title="regressed", scale=alt.Scale(domain=[False, True], range=[usual, "cross"]))


def fleet_trend_chart() -> alt.FacetChart:
    """Per job, its runs' median step, exposed share and bus bandwidth over time; runs that
    regressed against the job's baseline are drawn as crosses."""
    measures = {"step_ms": "median step (ms)", "exposed_share": "exposed share", "busbw_gbps": "bus bandwidth (Gbit/s)"}
    base = alt.Chart().encode(
        x=alt.X("started:T", title="run started", axis=alt.Axis(tickCount=8, labelOverlap=True)),
        y=alt.Y("value:Q", title=None),
        color=alt.Color("job:N", title="job"),
    )
    tooltip = ["job:N", "run_id:N", alt.Tooltip("started:T", format="%Y-%m-%d %H:%M"), "ranks:Q", "measure:N",
               alt.Tooltip("value:Q", format=".4g"), "bottleneck:N", "regressed:N"]
    lines = base.mark_line().encode(detail="ranks:O", tooltip=tooltip)
    points = base.mark_point(filled=True, size=70).encode(
        shape=_regressed_shape("circle"),
        tooltip=tooltip,
    )
    return (
        alt.layer(lines, points)
        .properties(width=720, height=140)
        .facet(row=alt.Row("measure:N", title=None, sort=list(measures.values())), data=_data("fleet_runs"))
        .transform_fold(list(measures), as_=["measure", "value"])
        .transform_filter("isValid(datum.value)")
        .transform_calculate(measure=f"{json.dumps(measures)}[datum.measure]")
        .resolve_scale(y="independent")
        .properties(title="Each job's runs over time (crosses: regressed against the job's baseline)")
    )


def fleet_verdicts_chart() -> alt.Chart:
    """Per job, each run's verdict over time: a square per run, coloured by its class."""
    return (
        alt.Chart(_data("fleet_runs"))
        .mark_square(size=120)
        .encode(
            x=alt.X("started:T", title="run started", axis=alt.Axis(tickCount=8, labelOverlap=True)),
            y=alt.Y("job:N", title="job"),
            color=alt.Color("bottleneck:N", title="verdict", legend=alt.Legend(labelLimit=320)),
            shape=_regressed_shape("square"),
            tooltip=["job:N", "run_id:N", alt.Tooltip("started:T", format="%Y-%m-%d %H:%M"), "bottleneck:N", "regressed:N"],
        )
        .properties(width=720, height=alt.Step(28), title="Each job's verdict, run by run (crosses: regressed)")
    )


def fleet_scaling_chart() -> alt.Chart:
    """Measured scaling factor against ranks, one line per job."""
    return _scaling_lines("fleet_scaling", alt.Color("job:N", title="job"), "measured scaling factor",
                          "Scaling across rank counts, per job")


# Every chart a report can draw, by the name the report asks for it by.
CHARTS = {
    "step_breakdown": step_breakdown_chart,
    "rank_breakdown": rank_breakdown_chart,
    "dimension_steps": dimension_steps_chart,
    "critical_path_steps": critical_path_steps_chart,
    "step_timeline": step_timeline_chart,
    "bandwidth_by_size": bandwidth_by_size_chart,
    "throughput": throughput_chart,
    "wait_vs_transfer": wait_vs_transfer_chart,
    "whatif": whatif_heatmap,
    "job_scaling": job_scaling_chart,
    "nccl_links": nccl_links_chart,
    "nccl_call_mix": nccl_call_mix_chart,
    "nccl_tests": nccl_tests_chart,
    "fleet_trend": fleet_trend_chart,
    "fleet_verdicts": fleet_verdicts_chart,
    "fleet_scaling": fleet_scaling_chart,
}


def specs() -> dict[str, dict]:
    """Every chart's Vega-Lite spec, checked against the schema, its data left to be named."""
    return {name: build().configure_range(category=PALETTE).to_dict(validate=True) for name, build in CHARTS.items()}
