"""Shared drawing for the dashboard's pages: cached reads, charts, and in-page explanations.

Data comes from tuner.report.dashboard_data (plain functions, tested on their own); this module only
caches it per database version and draws it. The pages never write, launch or import the launcher.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable

import pandas as pd
import streamlit as st
from charts_ui import (  # noqa: F401 (the pages draw them through this module)
    choose_chart,
    choose_points,
    curve_points,
    head_to_head_chart,
    importance_chart,
    load_curve_chart,
    pareto_chart,
    pareto_points,
    predicted_chart,
    progress_chart,
)
from tables_ui import fmt, money, number_columns, plural, rounded, table  # noqa: F401 (pages)

from tuner.report import dashboard_data as dd
from tuner.report.units import column_in_unit, device_unit, say, shared_unit
from tuner.store import Store, StoreError

CACHE_ENTRIES = 16


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


def unit_of(*datas: dd.StudyData) -> str:
    """The unit a page speaks in: its study's (per GPU, or per core on a CPU node); per device
    where the studies it sets side by side run on both."""
    return shared_unit(d.study.gpu_type for d in datas)


def state_badge(state: str) -> str:
    colors = {"running": "blue", "finished": "green", "stopped": "orange", "empty": "gray",
              "complete": "green", "failed": "red", "infeasible": "gray", "pruned": "orange"}
    return f":{colors.get(state, 'gray')}-badge[{state}]"


# ---------------------------------------------------------------- the best configuration card


def draw_best_card(card: dd.BestCard, data: dd.StudyData, *, key: str,
                   title: str = "Best configuration", icon: str = ":material/emoji_events:",
                   link: bool = True) -> None:
    """The configuration to take away: parameters, figures, launch command and export files."""
    s, unit = card.trial, device_unit(data.study.gpu_type)
    tok = column_in_unit(dd.TOK_GPU, unit)
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
        cols[0].metric(tok, fmt(f[dd.TOK_GPU]),
                       help=say("Output tokens per second per GPU at the best concurrency "
                                "level that met the SLA: the study's objective.", unit))
        if f.get("at rate req/s") is not None:
            cols[1].metric("at rate", f"{fmt(f['at rate req/s'])} req/s",
                           help=f"Poisson arrivals, at most {fmt(f['at concurrency'])} in flight")
        else:
            cols[1].metric("at concurrency", fmt(f["at concurrency"]))
        cols[2].metric("TTFT p90", f"{fmt(f['TTFT p90 ms'])} ms")
        cols[3].metric("tok/s per user p90", fmt(f[dd.USER_P90]),
                       help="The decode speed 90% of requests reach.")
        cols[4].metric("e2e p90", f"{fmt(f['e2e p90 ms'])} ms")
        cols[5].metric(column_in_unit("GPUs", unit), fmt(f["GPUs"]),
                       help=f"engine {f['engine']}")
        if f.get("tok/s 95% CI"):
            st.caption(f"{tok} 95% confidence interval: {f['tok/s 95% CI']} "
                       "(Student t over repeated rounds)")
        if dd.USD_MTOK in f:
            st.caption(f"{money(f[dd.USD_MTOK])} USD per million output tokens at this level; "
                       + say(f["price"], unit))
        st.caption(say(f["confirmation"], unit))
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
                st.caption(say(f"Not offered: {note}", unit))


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
