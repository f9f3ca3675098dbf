"""One study: the best configuration to take away, the Pareto chart, progress, every trial,
failures and parameter importance."""

import streamlit as st
import tuner_ui as ui

from tuner.report import dashboard_data as dd

TABS = ["Progress", "Trials", "Load curves", "Failures", "Parameter importance",
        "Predicted vs measured"]


def choose_study(storage: str, version: tuple) -> str | None:
    names = ui.study_names(storage, version)
    if not names:
        st.title("Study")
        st.info("No study yet in this database. Run one with `tuner run STUDY.yaml`; it appears "
                "here as soon as its first trial starts.")
        return None
    return st.sidebar.selectbox("Study", names, index=len(names) - 1, key="study",
                                bind="query-params")


def headline(data: dd.StudyData, summary: dd.StudySummary, unit: str) -> None:
    st.title(f"{summary.name}  {ui.state_badge(summary.state)}")
    st.markdown(ui.study_subtitle(summary) + f"  \nSLA: {dd.sla_text(summary.sla)}")
    c = summary.counts
    cols = st.columns(6)
    cols[0].metric(ui.say(f"best {dd.TOK_GPU}", unit), ui.fmt(summary.best_value),
                   help=ui.say("The highest output tok/s per GPU among trials that met the "
                               "SLA.", unit))
    cols[1].metric("complete", ui.fmt(c["complete"]))
    cols[2].metric("failed", ui.fmt(c["failed"]))
    cols[3].metric("infeasible", ui.fmt(c["infeasible"]),
                   help="Rejected before launch; no server ran.")
    cols[4].metric("running", ui.fmt(c["running"]))
    cols[5].metric(f"launched, of {ui.fmt(summary.budget)}", ui.fmt(summary.launched),
                   help="Trials that launched a server and reached a verdict, against the "
                        "spec's budget (n_trials).")


def pareto(data: dd.StudyData, summary: dd.StudySummary, storage: str, version: tuple,
           unit: str) -> None:
    st.markdown(ui.say("#### Throughput per GPU against per-user speed", unit))
    pts = ui.points(storage, data.study.name, version)
    if pts.empty:
        st.info("No concurrency level has been measured yet: the chart fills in as trials "
                "finish.")
        return
    c1, c2, c3 = st.columns([2, 2, 1], vertical_alignment="bottom")
    x = c1.segmented_control("per-user speed", [dd.USER_P90, dd.USER_P50], default=dd.USER_P90,
                             key="pareto_x") or dd.USER_P90
    color = c2.segmented_control("colour by", ["series", "concurrency", "state"],
                                 default="series", key="pareto_color") or "series"
    log_x = c3.toggle("log x", value=True, key="pareto_log")
    front = dd.pareto_front(pts, x=x)
    floor = dd.sla_user_floor(summary.sla)
    chart = ui.pareto_chart(front, x=x, color=color if color != "concurrency" else
                            "concurrency:N", sla_floor=floor, log_x=log_x, unit=unit)
    st.altair_chart(chart, width="stretch")
    n_front = len(front.front)
    # Counted from the rows the chart draws: a level where every request failed has no figure,
    # and a log axis has no 0.
    drawn = ui.pareto_points(front, x=x, log_x=log_x)
    no_figure = int((pts[x].isna() | pts[dd.TOK_GPU].isna()).sum())
    off_axis = len(pts) - no_figure - len(drawn)
    st.caption(
        f"{ui.plural(len(drawn), 'measured level')} drawn (one per trial and concurrency), "
        f"{n_front} on the Pareto front (the line)"
        + (f"; {no_figure} more where every request failed, which have no figure to draw"
           if no_figure else "")
        + (f"; {off_axis} more at 0 {x}, which a log axis cannot place" if off_axis else "")
        + ". Filled: the level met the SLA; hollow: it missed; pale: off the front. Shape: "
        "the trial's outcome (a pruned or failed trial's levels never make a winner). "
        "Series = engine and parallelism."
        + (" The dashed line is the SLA's per-user floor." if floor and x == dd.USER_P90
           else ""))
    with st.expander(ui.say(f"Pareto-optimal points ({n_front}): the best throughput per GPU "
                            "at each per-user speed", unit), expanded=n_front <= 8):
        table = front.front[["trial", "config", "concurrency", dd.TOK_GPU, x, "TTFT p90 ms",
                             "meets SLA"]].sort_values(dd.TOK_GPU, ascending=False)
        table.insert(0, "open", [dd.page_url("trial", study=data.study.name, trial=n)
                                 for n in table["trial"]])
        open_link = st.column_config.LinkColumn("", display_text="open", width="small")
        ui.table(table, unit, config={"open": open_link}, width="stretch",
                 height=min(35 * (len(table) + 1) + 3, 420))
        st.caption(ui.say("Further down the list is more interactive per user, at a cost per "
                          "GPU: pick the row that meets your latency needs.", unit))


def progress(data: dd.StudyData, unit: str) -> None:
    by = st.segmented_control("x axis", ["trial", "time"], default="trial",
                              key="progress_by") or "trial"
    frame = dd.progress_frame(data, by=by)
    if frame.empty:
        st.info("No trial has finished yet.")
        return
    st.altair_chart(ui.progress_chart(frame, by=by, unit=unit), width="stretch")
    # Counted from the frame the chart draws: what has no figure sits at 0, the rest at theirs.
    at_zero = int(frame[dd.TOK_GPU].isna().sum())
    others = frame[frame[dd.TOK_GPU].notna() & ~frame["outcome"].isin(["met SLA", "missed SLA"])]
    listed = ", ".join(f"trial {n} ({o})"
                       for n, o in zip(others["trial"], others["outcome"], strict=True))
    order = "by trial number" if by == "trial" else "in the order they finished"
    st.caption(f"{ui.plural(len(frame), 'finished trial')} drawn, {order}. The green step line "
               "is the best figure so far among trials that met the SLA."
               + (f" {ui.plural(at_zero, 'trial')} without a figure (failed to serve, or "
                  "infeasible) drawn at 0." if at_zero else "")
               + (f" Drawn at their figure but never the best: {listed}." if listed else ""))


def trials(data: dd.StudyData, storage: str, version: tuple, unit: str) -> None:
    frame = ui.trials_table(storage, data.study.name, version)
    if frame.empty:
        st.info("No trial yet.")
        return
    params = [dd.param_label(p) for p in dd.param_columns(data)]
    cols = st.columns(min(len(params) + 1, 6))
    states = cols[0].multiselect("state", [s for s in dd.STATES if (frame["state"] == s).any()],
                                 key="trials_state", placeholder="all")
    chosen = {}
    for i, p in enumerate(params):
        values = sorted(frame[p].dropna().unique().tolist(), key=dd.option_order)
        chosen[p] = cols[(i + 1) % len(cols)].multiselect(p, values, key=f"trials_{p}",
                                                          placeholder="all")
    s1, s2, _ = st.columns([2, 1, 3], vertical_alignment="bottom")
    sortable = ["trial", dd.TOK_GPU, "TTFT p90 ms", dd.USER_P90, "duration s", "started"]
    by = s1.selectbox("sort by", sortable, index=1, key="trials_sort",
                      format_func=lambda c: ui.column_in_unit(c, unit))
    descending = s2.toggle("descending", value=True, key="trials_desc")
    shown = dd.sort_trials(dd.filter_trials(frame, states=states, params=chosen), by,
                           descending=descending)
    shown = shown.copy()
    shown.insert(0, "open", [dd.page_url("trial", study=data.study.name, trial=n)
                             for n in shown["trial"]])
    config = {"open": st.column_config.LinkColumn("", display_text="open", width="small"),
              # A reason is long; the columns after it stay on screen at 1400 px (hover shows
              # it whole).
              "reason": st.column_config.TextColumn("reason", width="large")}
    ui.table(shown, unit, config=config, width="stretch", height=420)
    st.caption(ui.say(f"{len(shown):,} of {len(frame):,} trials. Figures are at the "
                      "concurrency level the objective comes from (the fastest per GPU that "
                      "met the SLA).", unit))


def load_curves(data: dd.StudyData, unit: str) -> None:
    curves = dd.load_curves(data)
    if curves is None:
        st.info("No level has been measured yet: each trial's curve appears when it finishes.")
        return
    y = st.radio("Against load", [dd.TOK_GPU, "TTFT p90 ms", dd.USER_P90], horizontal=True,
                 key="curve_y", format_func=lambda c: ui.column_in_unit(c, unit))
    st.altair_chart(ui.load_curve_chart(curves, y, unit=unit), width="stretch")
    drawn = ui.curve_points(curves, y)
    st.caption(f"{ui.plural(len(drawn), 'measured level')} of "
               f"{ui.plural(drawn['trial'].nunique(), 'trial')} drawn by {curves.load}: filled "
               "where the level met the SLA, a diamond at the highest load that met it (what a "
               "`concurrency: auto` search found; the objective is the throughput there), the "
               "SLA's target dashed.")
    found = (curves.frame.drop_duplicates("trial")
             .loc[lambda f: f["load search"].notna(), ["trial", "config", dd.LOAD_AT_SLA,
                                                      "load search"]])
    if not found.empty:
        ui.table(found, unit, width="stretch")


def failures(data: dd.StudyData, unit: str) -> None:
    groups = dd.failure_groups(data)
    if not groups:
        st.success("No trial failed and none was infeasible.")
        return
    total = sum(len(g.trials) for g in groups)
    st.markdown(f"{ui.plural(total, 'trial')} did not complete, for "
                f"{ui.plural(len(groups), 'distinct reason')}.")
    for i, g in enumerate(groups):
        reason = ui.say(g.reason, unit)
        title = f"**{g.kind}** · {ui.plural(len(g.trials), 'trial')} · {reason[:120]}"
        with st.expander(title, expanded=i == 0):
            st.markdown("**Reason**")
            st.code(reason, language=None, wrap_lines=True)
            shown = list(zip(g.trials, g.configs, strict=True))[:20]
            st.markdown("**Trials**: " + ", ".join(f"{n} (`{c}`)" for n, c in shown)
                        + (f" and {len(g.trials) - 20} more" if len(g.trials) > 20 else ""))
            if g.log_tail:
                st.markdown("**Server log tail** (latest trial of this group)")
                st.code(g.log_tail, language=None, height=300)
            elif g.kind == "infeasible":
                st.caption("Rejected before launch: no server ran, so there is no log.")


def importance(data: dd.StudyData, storage: str, version: tuple) -> None:
    imp = ui.importance(storage, data.study.name, version)
    if imp is None or not imp.values:
        st.info(imp.note if imp is not None and imp.note else "No importances.")
        return
    st.altair_chart(ui.importance_chart(imp.values), width="stretch")
    st.caption(f"Optuna's parameter importance (its default evaluator) over the {imp.complete} "
               "complete configurations this study measured, each once, at its figure: how "
               "much of the spread of their figures each parameter explains "
               f"({ui.plural(len(imp.values), 'parameter')} rated). Only parameters every one "
               "of them has are rated.")
    if imp.note:
        st.warning(imp.note)


def predicted(name: str, storage: str, version: tuple, unit: str) -> None:
    pvm = ui.predicted_vs_measured(storage, name, version)
    if pvm is None or not pvm.predicted:
        st.info("No predictions are stored for this study. The performance model stores them "
                f"with `tuner run SPEC --warm-start K`, or `tuner plan SPEC --storage URL "
                f"--study {name}`; they are kept apart from the measurements.")
        return
    if pvm.rows.empty:
        st.info(f"{pvm.predicted:,} predictions are stored, but no measured level has the same "
                "configuration and concurrency yet.")
        return
    rows = pvm.rows
    st.altair_chart(ui.predicted_chart(rows, unit=unit), width="stretch")
    st.caption(f"{len(rows)} measured levels with a stored prediction (of {pvm.predicted:,} "
               f"predictions); median |error| {pvm.median_abs_error:.0%}. On the dashed line the "
               "model was exact; above it, it predicted too much.")
    ui.table(rows, unit)


@ui.page
def render() -> None:
    ui.store_or_explain()
    storage, version = ui.url(), ui.version()
    name = choose_study(storage, version)
    if name is None:
        return
    data = ui.study(storage, name, version)
    if data is None:
        st.warning(f"Study {name!r} is not in this database any more.")
        return
    ui.follow_changes(version)
    summary = dd.summarize(data)
    unit = ui.unit_of(data)
    headline(data, summary, unit)
    if not data.trials:
        st.info("This study has no trial yet: it appears here as soon as its first trial "
                "starts.")
        return
    card = ui.best_card(storage, name, version)
    if card is None:
        counts = ", ".join(f"{n} {s}" for s, n in summary.counts.items() if n)
        st.warning(f"No trial met the SLA yet ({counts}), so there is no configuration to take "
                   "away. The Failures tab groups what went wrong; relax the SLA, widen the "
                   "search space or run more trials.")
    else:
        ui.draw_best_card(card, data, key="best")
    pareto(data, summary, storage, version, unit)

    views = [lambda: progress(data, unit), lambda: trials(data, storage, version, unit),
             lambda: load_curves(data, unit), lambda: failures(data, unit),
             lambda: importance(data, storage, version),
             lambda: predicted(name, storage, version, unit)]
    for tab, draw in zip(st.tabs(TABS, key="view", bind="query-params"), views, strict=True):
        with tab:
            if tab.open:  # only the open tab reads and draws
                draw()


render()
