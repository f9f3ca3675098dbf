"""Shared drawing for the dashboard's pages: cached reads, charts, and in-page explanations.

Data comes from tuner.report.dashboard_data (plain functions, tested on their own); this module only
caches it per database version and draws it. The pages never write, launch or import the launcher.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st
from tables_ui import FIGURES, fmt, money, number_columns, plural, rounded  # noqa: F401 (pages)

from tuner.report import dashboard_data as dd
from tuner.store import Store, StoreError

CACHE_ENTRIES = 16
SUCCESS = "#2e7d32"
STATE_COLORS = {"complete": "#2e7d32", "met SLA": "#2e7d32", "missed SLA": "#f9a825",
                "failed": "#c62828", "infeasible": "#9e9e9e", "running": "#1565c0",
                "pruned": "#8d6e63"}


# ---------------------------------------------------------------- errors never become traces


def page(render: Callable[[], None]) -> Callable[[], None]:
    """Run a page; an unexpected error is explained in one line, not shown as a stack trace.
    (st.stop and st.rerun are BaseExceptions and pass through.)"""

    @functools.wraps(render)
    def guarded() -> None:
        try:
            render()
        except StoreError as e:
            st.error(f"The study database cannot be read: {e}")
        except Exception as e:  # noqa: BLE001 (the page explains; the log keeps the trace)
            import logging

            logging.getLogger("tuner.dashboard").exception("page failed")
            text = " ".join(str(e).split()) or type(e).__name__
            st.error(f"This page could not be drawn: {type(e).__name__}: {text[:500]}")
            st.caption("Reload to try again. If it persists, report it with the line above; "
                       "the full trace is in the terminal that runs `tuner dashboard`.")

    return guarded


# ---------------------------------------------------------------- cached reads


def url() -> str:
    return dd.storage_url()


# One store per database for the whole process (every session, and `warm` before the server
# starts): opening one checks its schema, a noticeable part of a first page.
_STORES: dict[str, Store] = {}


def _store(storage: str) -> Store:
    store = _STORES.get(storage)
    if store is None:
        store = _STORES[storage] = dd.open_store(storage)
    return store


def store_or_explain() -> Store:
    """The store, or an explanation in the page and a stop: missing, foreign or unreadable."""
    storage = url()
    try:
        return _store(storage)
    except StoreError as e:
        st.title("tuner dashboard")
        st.error(str(e))
        st.info("The dashboard reads a study database that `tuner run STUDY.yaml` writes (by "
                "default `tuner.db` in the folder it runs in). Start a study, or point the "
                "dashboard at an existing database with `tuner dashboard --storage URL`.")
        st.stop()
        raise  # unreachable: st.stop raises


def version() -> tuple:
    return dd.data_version(url())


def studies(storage: str, version: tuple) -> list[dd.StudyData]:
    """Every study, each through the per-study cache (so opening one after this is instant)."""
    datas = (study(storage, name, version) for name in study_names(storage, version))
    return [d for d in datas if d is not None]


# (storage, study) -> (version, data): one process-wide entry per study, so every session shares
# it and `warm` (run before the server starts, outside Streamlit's runtime) fills it too.
_LATEST: dict[tuple[str, str], tuple[tuple, dd.StudyData | None]] = {}


def study(storage: str, name: str, version: tuple) -> dd.StudyData | None:
    """The study as of `version`, read once per version and shared by every session. Only the
    latest version of each study is kept: a study that writes for hours does not pile up."""
    hit = _LATEST.get((storage, name))
    if hit is not None and hit[0] == version:
        return hit[1]
    data = dd.read_study(_store(storage), name)
    _LATEST[(storage, name)] = (version, data)
    return data


def warm(storage: str) -> None:
    """Read every study once, before the first viewer asks (dashboard/serve.py). A database that
    cannot be read is left to the page, which explains it."""
    try:
        version = dd.data_version(storage)
        for s in dd.with_retry(_store(storage).list_studies):
            study(storage, s.name, version)
    except StoreError:
        return


@st.cache_resource(show_spinner=False, max_entries=CACHE_ENTRIES)
def study_names(storage: str, version: tuple) -> list[str]:
    return [s.name for s in dd.with_retry(_store(storage).list_studies)]


@st.cache_data(show_spinner=False, max_entries=CACHE_ENTRIES)
def trials_table(storage: str, name: str, version: tuple) -> pd.DataFrame:
    return dd.trials_frame(study(storage, name, version))


@st.cache_data(show_spinner=False, max_entries=CACHE_ENTRIES)
def points(storage: str, name: str, version: tuple) -> pd.DataFrame:
    return dd.measured_points(study(storage, name, version))


@st.cache_resource(show_spinner=False, max_entries=CACHE_ENTRIES)
def best_card(storage: str, name: str, version: tuple) -> dd.BestCard | None:
    return dd.best_card(study(storage, name, version))


@st.cache_resource(show_spinner=False, max_entries=CACHE_ENTRIES)
def trial_card(storage: str, name: str, number: int, version: tuple) -> dd.BestCard | None:
    """The card of one trial (the Choose page's winner), its exports made once per version."""
    data = study(storage, name, version)
    trial = None if data is None else next((t for t in data.trials if t.number == number), None)
    return None if trial is None else dd.best_card(data, trial)


@st.cache_resource(show_spinner=False, max_entries=CACHE_ENTRIES)
def ranking(storage: str, names: tuple[str, ...], version: tuple, min_tok_s_per_user: float,
            ttft_p90_ms: float | None, by: str) -> dd.Ranking:
    """`tuner choose` over these studies, once per version and targets."""
    datas = [d for d in (study(storage, n, version) for n in names) if d is not None]
    return dd.rank_studies(datas, dd.Targets(min_tok_s_per_user, ttft_p90_ms), by)


@st.cache_resource(show_spinner=False, max_entries=CACHE_ENTRIES)
def importance(storage: str, name: str, version: tuple) -> dd.Importance | None:
    data = study(storage, name, version)
    return None if data is None else dd.param_importances(data)


@st.cache_resource(show_spinner=False, max_entries=CACHE_ENTRIES)
def predicted_vs_measured(storage: str, name: str,
                          version: tuple) -> dd.PredictedVsMeasured | None:
    return dd.load_predicted_vs_measured(storage, name)


# ---------------------------------------------------------------- small pieces


def study_subtitle(s: dd.StudySummary) -> str:
    w = s.workload
    load = ""
    if w:
        levels = ", ".join(str(c) for c in w.get("concurrency", []))
        load = (f" · {w.get('input_len')} in / {w.get('output_len')} out tokens · "
                f"concurrency {levels}")
    return f"**{s.model}** on **{s.gpu_type}** with **{s.engine}**{load}"


def state_badge(state: str) -> str:
    colors = {"running": "blue", "finished": "green", "stopped": "orange", "empty": "gray",
              "complete": "green", "failed": "red", "infeasible": "gray", "pruned": "orange"}
    return f":{colors.get(state, 'gray')}-badge[{state}]"


# ---------------------------------------------------------------- charts


def pareto_chart(front: dd.ParetoFront, *, x: str, color: str, sla_floor: float | None,
                 log_x: bool, front_by: str | None = None, height: int = 440) -> alt.Chart:
    """Measured points (filled: level met the SLA; hollow: missed), the Pareto front as a step
    line, and the SLA's per-user floor as a dashed rule. Clicking a legend entry highlights it."""
    pts = front.points[front.points[x].notna() & front.points[dd.TOK_GPU].notna()].copy()
    pts["SLA"] = pts["meets SLA"].map({True: "met", False: "missed"})
    if log_x:
        pts = pts[pts[x] > 0]
    n = len(pts)
    size, faded = (70, 0.5) if n < 300 else (30, 0.35) if n < 3000 else (12, 0.25)
    pts["emphasis"] = pts["on front"].map({True: 1.0, False: faded})
    series = pts[color.split(":")[0]].nunique()
    columns = 1 if series <= height // 22 else 2
    palette = alt.Scale(scheme="tableau10" if series <= 10 else "category20")
    scale = alt.Scale(type="log") if log_x else alt.Scale(zero=False)
    color_field = color if ":" in color else f"{color}:N"
    xq = alt.X(f"{x}:Q", title=f"{x}  →  more interactive", scale=scale)
    yq = alt.Y(f"{dd.TOK_GPU}:Q", title="output tok/s per GPU  →  cheaper")
    picked = alt.selection_point(fields=[color_field.split(":")[0]], bind="legend")
    tooltip = [alt.Tooltip("study:N"), alt.Tooltip("trial:Q"), alt.Tooltip("config:N"),
               alt.Tooltip("concurrency:Q"), alt.Tooltip(f"{dd.TOK_GPU}:Q", format=",.0f"),
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
        tooltip=tooltip,
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
        rule = pd.DataFrame({x: [sla_floor], "label": [f"SLA ≥ {sla_floor:,.0f} tok/s/user"]})
        rx = alt.X(f"{x}:Q", scale=scale)
        layers.append(alt.Chart(rule).mark_rule(color="#c62828", strokeDash=[6, 4],
                                                strokeWidth=2).encode(x=rx))
        layers.append(alt.Chart(rule).mark_text(color="#c62828", align="left", dx=5, dy=6,
                                                baseline="top", fontWeight="bold").encode(
            x=rx, y=alt.value(0), text="label:N"))
    return alt.layer(*layers).properties(height=height).interactive()


def choose_chart(points: pd.DataFrame, *, y: str, target: float, winner: dict[str, Any] | None,
                 log_x: bool, height: int = 460) -> alt.Chart:
    """Every study's measured points: per-user p90 against `y` (USD per million tokens or
    tok/s per GPU), one colour per GPU type and engine (filled: the level met its study's SLA),
    the per-user target as a dashed rule, and the winner as a star."""
    pts = points[points[dd.USER_P90].notna() & points[y].notna()]
    if log_x:
        pts = pts[pts[dd.USER_P90] > 0]
    pts = pts[[dd.HARDWARE, "study", "trial", "config", "concurrency", dd.USER_P90, y,
               "TTFT p90 ms", "meets SLA"]].copy()
    pts["SLA"] = pts["meets SLA"].map({True: "met", False: "missed"})
    n = len(pts)
    size, opacity = (70, 0.75) if n < 300 else (30, 0.5) if n < 3000 else (12, 0.35)
    scale = alt.Scale(type="log") if log_x else alt.Scale(zero=False)
    xq = alt.X(f"{dd.USER_P90}:Q", title=f"{dd.USER_P90}  →  more interactive", scale=scale)
    cheaper = "  ↓ cheaper" if y == dd.USD_MTOK else "  →  more per GPU"
    yq = alt.Y(f"{y}:Q", title=y + cheaper, scale=alt.Scale(zero=False))
    palette = alt.Scale(scheme="tableau10")
    color = alt.Color(f"{dd.HARDWARE}:N", scale=palette, title=dd.HARDWARE,
                      legend=alt.Legend(orient="right", labelLimit=220))
    tooltip = [alt.Tooltip(f"{dd.HARDWARE}:N"), alt.Tooltip("study:N"), alt.Tooltip("trial:Q"),
               alt.Tooltip("config:N"), alt.Tooltip("concurrency:Q"),
               alt.Tooltip(f"{y}:Q", format=",.4g"),
               alt.Tooltip(f"{dd.USER_P90}:Q", format=",.1f"),
               alt.Tooltip("TTFT p90 ms:Q", format=",.0f"), alt.Tooltip("SLA:N")]
    dots = alt.Chart(pts).mark_point(size=size, strokeWidth=1.2, opacity=opacity).encode(
        x=xq, y=yq, color=color, tooltip=tooltip,
        fill=alt.condition("datum.SLA == 'met'", color, alt.value("transparent")))
    rule = pd.DataFrame({dd.USER_P90: [target], "label": [f"target ≥ {target:,.0f} tok/s/user"]})
    rx = alt.X(f"{dd.USER_P90}:Q", scale=scale)
    layers: list[alt.Chart] = [dots]
    if not log_x or target > 0:
        layers.append(alt.Chart(rule).mark_rule(color="#c62828", strokeDash=[6, 4],
                                                strokeWidth=2).encode(x=rx))
        layers.append(alt.Chart(rule).mark_text(color="#c62828", align="left", dx=5, dy=6,
                                                baseline="top", fontWeight="bold").encode(
            x=rx, y=alt.value(0), text="label:N"))
    if winner is not None:
        star = pd.DataFrame([winner])
        layers.append(alt.Chart(star).mark_point(shape="diamond", size=320, filled=True,
                                                 color="#111", opacity=0.9).encode(
            x=rx, y=alt.Y(f"{y}:Q"), tooltip=[alt.Tooltip("label:N")]))
    return alt.layer(*layers).properties(height=height).interactive()


def progress_chart(frame: pd.DataFrame, *, by: str) -> alt.Chart:
    xcol = "trial" if by == "trial" else "finished"
    if by == "trial":
        x = alt.X("trial:Q", title="trial number",
                  scale=alt.Scale(padding=14, zero=False, nice=False),
                  axis=alt.Axis(tickMinStep=1, format="d"))
    else:
        x = alt.X(f"{xcol}:T", title="finished (UTC)", scale=alt.Scale(padding=14, nice=False))
    data = frame.copy()
    data["figure"] = data[dd.TOK_GPU].fillna(0.0)
    dots = alt.Chart(data).mark_point(size=60, filled=True).encode(
        x=x, y=alt.Y("figure:Q", title="output tok/s per GPU", scale=alt.Scale(padding=8)),
        color=alt.Color("outcome:N", scale=alt.Scale(domain=list(STATE_COLORS),
                                                     range=list(STATE_COLORS.values())),
                        legend=alt.Legend(orient="bottom")),
        shape=alt.Shape("outcome:N", legend=None),
        tooltip=["trial", "outcome", "config", alt.Tooltip(dd.TOK_GPU, format=",.0f"),
                 alt.Tooltip("best so far", format=",.0f"), "finished"])
    best = data[data["best so far"].notna()]
    line = alt.Chart(best).mark_line(interpolate="step-after", color=SUCCESS,
                                     strokeWidth=2.5).encode(
        x=x, y="best so far:Q", tooltip=["trial", alt.Tooltip("best so far", format=",.0f")])
    return alt.layer(line, dots).properties(height=320).interactive()


def load_curve_chart(curves: dd.LoadCurves, y: str, *, height: int = 340) -> alt.Chart:
    """Each trial's load curve: load against `y` (tok/s/GPU, TTFT p90 ms or per-user p90), one
    line per trial in order of load, filled points where the level met the SLA, a diamond at
    the highest load that met it, and the SLA's target on `y` as a dashed rule."""
    pts = curves.frame[curves.frame[y].notna()].copy()
    pts["trial"] = pts["trial"].astype(str)
    pts["SLA"] = pts["meets SLA"].map({True: "met", False: "missed"})
    spread = pts["load"].max() / max(pts["load"].min(), 1e-9) if len(pts) else 1
    scale = alt.Scale(type="log", base=2) if spread >= 8 else alt.Scale(zero=False)
    # Concurrency is a whole number (no 4.5 ticks); one colour per trial whatever the measure.
    axis = alt.Axis(tickMinStep=1, format="d") if curves.load == "concurrency" else alt.Axis()
    x = alt.X("load:Q", title=curves.load, scale=scale, axis=axis)
    yq = alt.Y(f"{y}:Q", title=y, scale=alt.Scale(zero=False))
    trials = [str(n) for n in sorted(curves.frame["trial"].unique())]
    color = alt.Color("trial:N", scale=alt.Scale(scheme="tableau10", domain=trials),
                      legend=alt.Legend(orient="right"))
    tooltip = ["trial", "config", alt.Tooltip("load:Q", title=curves.load),
               alt.Tooltip(f"{y}:Q", format=",.1f"), "SLA", "cap engaged", "load search"]
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
        rule = pd.DataFrame({y: [target[y]]})
        layers.append(alt.Chart(rule).mark_rule(color="#c62828", strokeDash=[6, 4],
                                                strokeWidth=2).encode(y=f"{y}:Q"))
    return alt.layer(*layers).properties(height=height).interactive()


def importance_chart(values: dict[str, float]) -> alt.Chart:
    data = pd.DataFrame({"parameter": list(values), "importance": list(values.values())})
    return alt.Chart(data).mark_bar(color="#1565c0").encode(
        x=alt.X("importance:Q", title="importance (normalized to sum to 100%)",
                axis=alt.Axis(format="%")),
        y=alt.Y("parameter:N", sort="-x", title=None, axis=alt.Axis(labelLimit=320)),
        tooltip=["parameter", alt.Tooltip("importance", format=".1%")],
    ).properties(height=40 * len(values) + 30)


# ---------------------------------------------------------------- the best configuration card


def draw_best_card(card: dd.BestCard, data: dd.StudyData, *, key: str,
                   title: str = "Best configuration", icon: str = ":material/emoji_events:",
                   link: bool = True) -> None:
    """The configuration to take away: parameters, figures, launch command and export files."""
    s = card.trial
    with st.container(border=True):
        head, right = st.columns([5, 1], vertical_alignment="center")
        head.markdown(f"#### {icon} {title} · trial {s.number}")
        if link:
            right.page_link("views/trial.py", label="Trial details",
                            icon=":material/open_in_new:",
                            query_params={"study": data.study.name, "trial": str(s.number)})
        st.markdown(" ".join(f"`{dd.param_label(k)}={dd.param_value(v)}`"
                             for k, v in card.params.items()))
        f = card.figures
        cols = st.columns(6)
        cols[0].metric(dd.TOK_GPU, fmt(f[dd.TOK_GPU]),
                       help="Output tokens per second per GPU at the best concurrency level "
                            "that met the SLA: the study's objective.")
        if f.get("at rate req/s") is not None:
            cols[1].metric("at rate", f"{fmt(f['at rate req/s'])} req/s",
                           help=f"Poisson arrivals, at most {fmt(f['at concurrency'])} in flight")
        else:
            cols[1].metric("at concurrency", fmt(f["at concurrency"]))
        cols[2].metric("TTFT p90", f"{fmt(f['TTFT p90 ms'])} ms")
        cols[3].metric("tok/s per user p90", fmt(f[dd.USER_P90]),
                       help="The decode speed 90% of requests reach.")
        cols[4].metric("e2e p90", f"{fmt(f['e2e p90 ms'])} ms")
        cols[5].metric("GPUs", fmt(f["GPUs"]), help=f"engine {f['engine']}")
        if f.get("tok/s 95% CI"):
            st.caption(f"{dd.TOK_GPU} 95% confidence interval: {f['tok/s 95% CI']} "
                       "(Student t over repeated rounds)")
        if dd.USD_MTOK in f:
            st.caption(f"{money(f[dd.USD_MTOK])} USD per million output tokens at this level; "
                       f"{f['price']}")
        st.caption(f["confirmation"])
        if f.get("quality"):
            st.caption(f"quality against the study's reference answers: {f['quality']}")
        left, right = st.columns([3, 2], gap="medium")
        with left:
            if card.command:
                st.markdown("**Launch command**, run in the folder of its config file")
                command_block(card.command)
        with right:
            if card.files:
                st.markdown("**Export files**")
                names = list(card.files)
                for row in range(0, len(names), 2):
                    for col, name in zip(st.columns(2), names[row:row + 2], strict=False):
                        mime = {".json": "application/json", ".sh": "text/x-shellscript"}.get(
                            name[name.rfind("."):], "application/yaml")
                        col.download_button(name, card.files[name], file_name=name, mime=mime,
                                            icon=":material/download:", on_click="ignore",
                                            key=f"{key}-dl-{name}", width="stretch")
                st.caption("Byte for byte what `tuner export` writes for this trial.")
            for note in card.notes:
                st.caption(f"Not offered: {note}")


def command_block(command: str) -> None:
    """A command in a monospace block. Not st.code: its syntax highlighter is the browser's
    largest script to run on the Choose page (about 0.2 s of 2 s on 2 cores); the Trial page's
    st.code has a copy button, and launch.sh is among the downloads."""
    st.html(f"<pre style='white-space:pre-wrap;word-break:break-all;margin:0;padding:0.75rem 1rem;"
            f"background:#f6f8fa;border-radius:0.5rem;font-size:0.85rem'>{html.escape(command)}"
            "</pre>")


def follow_changes(version: tuple, *, every_s: float = 5.0) -> None:
    """In the sidebar: while on, re-run the page when the database changes (a study writing)."""
    live = st.sidebar.toggle("Live", value=True, key="live",
                             help="Re-read and redraw when a study writes to the database "
                                  f"(checked every {every_s:.0f} s).")
    if not live:
        return

    @st.fragment(run_every=every_s)
    def _watch() -> None:
        if dd.data_version(url()) != version:
            st.rerun(scope="app")

    with st.sidebar:
        _watch()
