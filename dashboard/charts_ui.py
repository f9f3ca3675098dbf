"""The dashboard's charts, each said in its page's unit (tok/s per GPU, per core or per
device), and the rows each one draws: a caption counts from the same rows the chart sends.

The frames come from tuner.report.dashboard_data with their own column names; a chart renames
them to its unit before drawing, so its axes, legends and tooltips never say GPU on a CPU study.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from tuner.report import dashboard_data as dd
from tuner.report.units import column_in_unit, frame_in_unit, say

SUCCESS = "#2e7d32"
STATE_COLORS = {"complete": "#2e7d32", "met SLA": "#2e7d32", "missed SLA": "#f9a825",
                "failed": "#c62828", "infeasible": "#9e9e9e", "running": "#1565c0",
                "pruned": "#8d6e63"}


def _sla_rule(column: str, value: float, label: str, scale: alt.Scale) -> list[alt.Chart]:
    """A dashed vertical line at `value` on `column`, with its label at the top."""
    rule = pd.DataFrame({column: [value], "label": [label]})
    rx = alt.X(f"{column}:Q", scale=scale)
    return [alt.Chart(rule).mark_rule(color="#c62828", strokeDash=[6, 4],
                                      strokeWidth=2).encode(x=rx),
            alt.Chart(rule).mark_text(color="#c62828", align="left", dx=5, dy=6,
                                      baseline="top", fontWeight="bold").encode(
                x=rx, y=alt.value(0), text="label:N")]


# ---------------------------------------------------------------- Pareto (Study, Compare)


def pareto_points(front: dd.ParetoFront, *, x: str, log_x: bool) -> pd.DataFrame:
    """The levels the Pareto chart draws: both figures measured (a level where every request
    failed has none), and above 0 on a log x axis."""
    pts = front.points[front.points[x].notna() & front.points[dd.TOK_GPU].notna()]
    return pts[pts[x] > 0] if log_x else pts


# A drawn level's trial, as the Pareto legend names it.
OUTCOMES = {"complete": "complete", "pruned": "pruned", "failed": "failed"}


def pareto_chart(front: dd.ParetoFront, *, x: str, color: str, sla_floor: float | None,
                 log_x: bool, unit: str, front_by: str | None = None,
                 height: int = 440) -> alt.Chart:
    """Measured points (filled: level met the SLA; hollow: missed), the Pareto front as a step
    line, and the SLA's per-user floor as a dashed rule. Clicking a legend entry highlights it."""
    pts = frame_in_unit(pareto_points(front, x=x, log_x=log_x), unit).copy()
    tok = column_in_unit(dd.TOK_GPU, unit)
    pts["SLA"] = pts["meets SLA"].map({True: "met", False: "missed"})
    # Levels of trials that did not complete (pruned; failed, e.g. the quality gate) are drawn,
    # with a shape of their own in the legend: their figures never make a winner.
    pts["trial outcome"] = pts["state"].map(OUTCOMES).fillna(pts["state"]) \
        if "state" in pts else "complete"
    n = len(pts)
    size, faded = (70, 0.5) if n < 300 else (30, 0.35) if n < 3000 else (12, 0.25)
    pts["emphasis"] = pts["on front"].map({True: 1.0, False: faded})
    series = pts[color.split(":")[0]].nunique()
    columns = 1 if series <= height // 22 else 2
    palette = alt.Scale(scheme="tableau10" if series <= 10 else "category20")
    scale = alt.Scale(type="log") if log_x else alt.Scale(zero=False)
    color_field = color if ":" in color else f"{color}:N"
    xq = alt.X(f"{x}:Q", title=f"{x}  →  more interactive", scale=scale)
    yq = alt.Y(f"{tok}:Q", title=say("output tok/s per GPU  →  cheaper", unit))
    picked = alt.selection_point(fields=[color_field.split(":")[0]], bind="legend")
    tooltip = [alt.Tooltip("study:N"), alt.Tooltip("trial:Q"), alt.Tooltip("config:N"),
               alt.Tooltip("concurrency:Q"), alt.Tooltip(f"{tok}:Q", format=",.0f"),
               alt.Tooltip(f"{x}:Q", format=",.1f"),
               alt.Tooltip("TTFT p90 ms:Q", format=",.0f"), alt.Tooltip("SLA:N"),
               alt.Tooltip("on front:N")]
    dots = alt.Chart(pts).mark_point(size=size, strokeWidth=1.5).encode(
        x=xq, y=yq,
        color=alt.Color(color_field, title=color.split(":")[0], scale=palette,
                        legend=alt.Legend(orient="right", symbolLimit=0, labelLimit=220,
                                          symbolOpacity=1, columns=columns)),
        fill=alt.condition("datum.SLA == 'met'",
                           alt.Color(color_field, scale=palette, legend=None),
                           alt.value("transparent")),
        opacity=alt.condition(picked, alt.Opacity("emphasis:Q", scale=None, legend=None),
                              alt.value(0.05)),
        shape=alt.Shape("trial outcome:N", scale=alt.Scale(domain=list(OUTCOMES.values()),
                                                           range=["circle", "triangle-up",
                                                                  "cross"]),
                        legend=alt.Legend(orient="right", title="trial")),
        tooltip=[*tooltip, alt.Tooltip("trial outcome:N")],
    ).add_params(picked)
    layers: list[alt.Chart] = [dots]
    fr = pts[pts["on front"]].sort_values(x)
    if len(fr) > 1:
        enc: dict[str, Any] = {"x": xq, "y": yq, "order": alt.Order(f"{x}:Q")}
        if front_by:
            enc["color"] = alt.Color(f"{front_by}:N", scale=palette, title=front_by)
            enc["detail"] = f"{front_by}:N"
        line = alt.Chart(fr).mark_line(interpolate="step-after", strokeWidth=2, opacity=0.7,
                                       color="#444")
        layers.insert(0, line.encode(**enc))
    if sla_floor is not None and x == dd.USER_P90:
        layers += _sla_rule(x, sla_floor, f"SLA ≥ {sla_floor:,.0f} tok/s/user", scale)
    return alt.layer(*layers).properties(height=height).interactive()


# ---------------------------------------------------------------- Choose


def choose_points(drawn: pd.DataFrame, *, y: str, log_x: bool) -> pd.DataFrame:
    """The levels the Choose chart draws: both figures measured, above 0 on a log x axis."""
    pts = drawn[drawn[dd.USER_P90].notna() & drawn[y].notna()]
    return pts[pts[dd.USER_P90] > 0] if log_x else pts


def choose_chart(points: pd.DataFrame, *, y: str, target: float, winner: dict[str, Any] | None,
                 log_x: bool, unit: str, height: int = 460) -> alt.Chart:
    """Every study's measured points: per-user p90 against `y` (USD per million tokens or
    tok/s per GPU), one colour per GPU type and engine (filled: the level met its study's SLA),
    the per-user target as a dashed rule, and the winner as a star."""
    pts = choose_points(points, y=y, log_x=log_x)
    pts = pts[[dd.HARDWARE, "study", "trial", "config", "concurrency", dd.USER_P90, y,
               "TTFT p90 ms", "meets SLA"]].copy()
    pts["SLA"] = pts["meets SLA"].map({True: "met", False: "missed"})
    pts = frame_in_unit(pts, unit)
    yf, hardware = column_in_unit(y, unit), column_in_unit(dd.HARDWARE, unit)
    n = len(pts)
    size, opacity = (70, 0.75) if n < 300 else (30, 0.5) if n < 3000 else (12, 0.35)
    scale = alt.Scale(type="log") if log_x else alt.Scale(zero=False)
    xq = alt.X(f"{dd.USER_P90}:Q", title=f"{dd.USER_P90}  →  more interactive", scale=scale)
    cheaper = "  ↓ cheaper" if y == dd.USD_MTOK else say("  →  more per GPU", unit)
    yq = alt.Y(f"{yf}:Q", title=yf + cheaper, scale=alt.Scale(zero=False))
    palette = alt.Scale(scheme="tableau10")
    color = alt.Color(f"{hardware}:N", scale=palette, title=hardware,
                      legend=alt.Legend(orient="right", labelLimit=220))
    tooltip = [alt.Tooltip(f"{hardware}:N"), alt.Tooltip("study:N"), alt.Tooltip("trial:Q"),
               alt.Tooltip("config:N"), alt.Tooltip("concurrency:Q"),
               alt.Tooltip(f"{yf}:Q", format=",.4g"),
               alt.Tooltip(f"{dd.USER_P90}:Q", format=",.1f"),
               alt.Tooltip("TTFT p90 ms:Q", format=",.0f"), alt.Tooltip("SLA:N")]
    dots = alt.Chart(pts).mark_point(size=size, strokeWidth=1.2, opacity=opacity).encode(
        x=xq, y=yq, color=color, tooltip=tooltip,
        fill=alt.condition("datum.SLA == 'met'", color, alt.value("transparent")))
    layers: list[alt.Chart] = [dots]
    if not log_x or target > 0:
        layers += _sla_rule(dd.USER_P90, target, f"target ≥ {target:,.0f} tok/s/user", scale)
    if winner is not None:
        star = frame_in_unit(pd.DataFrame([winner]), unit)
        layers.append(alt.Chart(star).mark_point(shape="diamond", size=320, filled=True,
                                                 color="#111", opacity=0.9).encode(
            x=alt.X(f"{dd.USER_P90}:Q", scale=scale), y=alt.Y(f"{yf}:Q"),
            tooltip=[alt.Tooltip("label:N")]))
    return alt.layer(*layers).properties(height=height).interactive()


# ---------------------------------------------------------------- Progress


def progress_chart(frame: pd.DataFrame, *, by: str, unit: str) -> alt.Chart:
    """Every finished trial at its figure (0 without one), by trial number or finish time, and
    the best figure so far as a green step line."""
    xcol = "trial" if by == "trial" else "finished"
    if by == "trial":
        x = alt.X("trial:Q", title="trial number",
                  scale=alt.Scale(padding=14, zero=False, nice=False),
                  axis=alt.Axis(tickMinStep=1, format="d"))
    else:
        x = alt.X(f"{xcol}:T", title="finished (UTC)", scale=alt.Scale(padding=14, nice=False))
    data = frame.copy()
    data["figure"] = data[dd.TOK_GPU].fillna(0.0)
    data = frame_in_unit(data, unit)
    tok = column_in_unit(dd.TOK_GPU, unit)
    dots = alt.Chart(data).mark_point(size=60, filled=True).encode(
        x=x, y=alt.Y("figure:Q", title=say("output tok/s per GPU", unit),
                     scale=alt.Scale(padding=8)),
        color=alt.Color("outcome:N", scale=alt.Scale(domain=list(STATE_COLORS),
                                                     range=list(STATE_COLORS.values())),
                        legend=alt.Legend(orient="bottom")),
        shape=alt.Shape("outcome:N", legend=None),
        tooltip=["trial", "outcome", "config", alt.Tooltip(f"{tok}:Q", format=",.0f"),
                 alt.Tooltip("best so far", format=",.0f"), "finished"])
    best = data[data["best so far"].notna()]
    line = alt.Chart(best).mark_line(interpolate="step-after", color=SUCCESS,
                                     strokeWidth=2.5).encode(
        x=x, y="best so far:Q", tooltip=["trial", alt.Tooltip("best so far", format=",.0f")])
    return alt.layer(line, dots).properties(height=320).interactive()


# ---------------------------------------------------------------- load curves


def curve_points(curves: dd.LoadCurves, y: str) -> pd.DataFrame:
    """The levels a load-curve chart draws against `y`: those with a figure for it."""
    return curves.frame[curves.frame[y].notna()]


def load_curve_chart(curves: dd.LoadCurves, y: str, *, unit: str,
                     height: int = 340) -> alt.Chart:
    """Each trial's load curve: load against `y` (tok/s/GPU, TTFT p90 ms or per-user p90), one
    line per trial in order of load, filled points where the level met the SLA, a diamond at
    the highest load that met it, and the SLA's target on `y` as a dashed rule."""
    pts = curve_points(curves, y).copy()
    pts["trial"] = pts["trial"].astype(str)
    pts["SLA"] = pts["meets SLA"].map({True: "met", False: "missed"})
    pts = frame_in_unit(pts, unit)
    yf = column_in_unit(y, unit)
    spread = pts["load"].max() / max(pts["load"].min(), 1e-9) if len(pts) else 1
    scale = alt.Scale(type="log", base=2) if spread >= 8 else alt.Scale(zero=False)
    # Concurrency is a whole number (no 4.5 ticks); one colour per trial whatever the measure.
    axis = alt.Axis(tickMinStep=1, format="d") if curves.load == "concurrency" else alt.Axis()
    x = alt.X("load:Q", title=curves.load, scale=scale, axis=axis)
    yq = alt.Y(f"{yf}:Q", title=yf, scale=alt.Scale(zero=False))
    trials = [str(n) for n in sorted(curves.frame["trial"].unique())]
    color = alt.Color("trial:N", scale=alt.Scale(scheme="tableau10", domain=trials),
                      legend=alt.Legend(orient="right"))
    tooltip = ["trial", "config", alt.Tooltip("load:Q", title=curves.load),
               alt.Tooltip(f"{yf}:Q", format=",.1f"), "SLA", "cap engaged", "load search"]
    base = alt.Chart(pts)
    line = base.mark_line(strokeWidth=1.5, opacity=0.7).encode(
        x=x, y=yq, color=color, order="load:Q", detail="trial:N")
    dots = base.mark_point(size=60, strokeWidth=1.5).encode(
        x=x, y=yq, color=color, tooltip=tooltip,
        fill=alt.condition("datum.SLA == 'met'", color, alt.value("transparent")))
    marked = base.transform_filter("datum['at SLA']").mark_point(
        shape="diamond", size=220, filled=True, opacity=0.9).encode(
        x=x, y=yq, color=color, tooltip=tooltip)
    layers: list[alt.Chart] = [line, dots, marked]
    target = {"TTFT p90 ms": curves.ttft_p90_ms, dd.USER_P90: curves.min_tok_s_per_user_p90}
    if target.get(y) is not None:
        rule = pd.DataFrame({yf: [target[y]]})
        layers.append(alt.Chart(rule).mark_rule(color="#c62828", strokeDash=[6, 4],
                                                strokeWidth=2).encode(y=f"{yf}:Q"))
    return alt.layer(*layers).properties(height=height).interactive()


# ---------------------------------------------------------------- importance, predictions


def importance_chart(values: dict[str, float]) -> alt.Chart:
    data = pd.DataFrame({"parameter": list(values), "importance": list(values.values())})
    return alt.Chart(data).mark_bar(color="#1565c0").encode(
        x=alt.X("importance:Q", title="importance (normalized to sum to 100%)",
                axis=alt.Axis(format="%")),
        y=alt.Y("parameter:N", sort="-x", title=None, axis=alt.Axis(labelLimit=320)),
        tooltip=["parameter", alt.Tooltip("importance", format=".1%")],
    ).properties(height=40 * len(values) + 30)


def predicted_chart(rows: pd.DataFrame, *, unit: str) -> alt.Chart:
    """Each measured level with a stored prediction: measured against predicted, on the same
    scale, with the diagonal where the model was exact."""
    rows = frame_in_unit(rows, unit)
    measured = column_in_unit("measured tok/s/GPU", unit)
    predicted = column_in_unit("predicted tok/s/GPU", unit)
    top = float(max(rows[predicted].max(), rows[measured].max())) * 1.05
    diagonal = alt.Chart(pd.DataFrame({"x": [0, top], "y": [0, top]})).mark_line(
        strokeDash=[4, 4], color="grey").encode(x="x:Q", y="y:Q")
    dots = alt.Chart(rows).mark_circle(size=80).encode(
        x=alt.X(f"{measured}:Q", scale=alt.Scale(domain=[0, top])),
        y=alt.Y(f"{predicted}:Q", scale=alt.Scale(domain=[0, top])),
        color="concurrency:N", tooltip=list(rows.columns))
    return diagonal + dots


def head_to_head_chart(rounds: pd.DataFrame, *, unit: str) -> alt.Chart:
    """The finalists' rounds over time, one line per trial."""
    tok = column_in_unit(dd.TOK_GPU, unit)
    return alt.Chart(frame_in_unit(rounds, unit)).mark_line(point=True).encode(
        x=alt.X("at:T", title="time"),
        y=alt.Y(f"{tok}:Q", title=tok, scale=alt.Scale(zero=False)),
        color=alt.Color("trial:N", scale=alt.Scale(scheme="tableau10")),
        tooltip=["trial", "pair", alt.Tooltip("at:T", format="%H:%M:%S"),
                 alt.Tooltip(f"{tok}:Q", format=",.0f")])
