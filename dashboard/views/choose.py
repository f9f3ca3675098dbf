"""Choose across studies (H200 against B200, vLLM against TensorRT-LLM) at the per-user speed a
product needs: every study's measured points on one chart, the cheapest configuration meeting
the targets as a card with its downloads, and the runners-up with their gap to the winner."""

import pandas as pd
import streamlit as st
import tuner_ui as ui

from tuner.report import dashboard_data as dd


@ui.page
def render() -> None:
    ui.store_or_explain()
    storage, version = ui.url(), ui.version()
    st.title("Choose by cost")
    ui.follow_changes(version)
    names = ui.study_names(storage, version)
    if not names:
        st.info("No study yet in this database. Run one with `tuner run STUDY.yaml`, and more "
                "(on other hardware or engines) into the same database to choose between "
                "them.")
        return
    chosen = st.multiselect("Studies", names, default=names, key="choose_studies",
                            bind="query-params", placeholder="choose one or more")
    if not chosen:
        st.info("Choose one or more studies.")
        return
    datas = [d for d in (ui.study(storage, n, version) for n in chosen) if d is not None]
    unit = ui.unit_of(*datas)  # per device where GPU and CPU studies are chosen between
    floors = [f for f in (dd.sla_user_floor(dict(d.study.spec.get("sla") or {}))
                          for d in datas) if f is not None]

    c1, c2, c3, c4 = st.columns([2, 2, 2, 1], vertical_alignment="bottom")
    target = c1.number_input("at least tok/s per user (p90)", min_value=0.0,
                             value=float(max(floors, default=0.0)), step=10.0,
                             key="choose_user")
    ttft = c2.number_input("TTFT p90 at most, ms (0: any)", min_value=0.0, value=0.0,
                           step=100.0, key="choose_ttft")
    by = c3.segmented_control("rank by", list(dd.BY), default="cost", key="choose_by") or "cost"
    log_x = c4.toggle("log x", value=False, key="choose_log")
    ranking = ui.ranking(storage, tuple(chosen), version, float(target),
                         float(ttft) if ttft else None, by)
    y = dd.USD_MTOK if by == "cost" else dd.TOK_GPU

    points = dd.choice_points([ui.points(storage, n, version) for n in chosen])
    best = ranking.choices[0] if ranking.choices else None
    if points.empty:
        st.info("None of these studies has a measured concurrency level yet.")
    else:
        star = None if best is None else {
            dd.USER_P90: best.level.tok_s_per_user_p90,
            y: best.usd_per_mtok if by == "cost" else best.tok_s_per_gpu,
            "label": f"chosen: {best.study.name} trial {best.trial.number}"}
        drawn = dd.drawn_points(points, y)
        st.altair_chart(ui.choose_chart(drawn.points, y=y, target=float(target), winner=star,
                                        log_x=log_x, unit=unit), width="stretch")
        shown = ui.choose_points(drawn.points, y=y, log_x=log_x)
        studies = "1 study" if len(datas) == 1 else f"{len(datas)} studies"
        thinned = "" if not drawn.left_out else (
            f" Drawn: the {drawn.front:,} levels on their hardware and engine's front (no level "
            "of the same hardware is faster per user and as good on the y axis) and an even "
            f"sample of {drawn.sampled:,} of the other {drawn.sampled + drawn.left_out:,}; the "
            "ranking and its table use every level.")
        off_axis = len(drawn.points) - len(shown)
        if off_axis:
            thinned += f" {off_axis} more at 0 {dd.USER_P90}, which a log axis cannot place."
        st.caption(f"{ui.plural(len(shown), 'measured level')} of {studies} drawn, "
                   "first runs; "
                   "filled: the level met its study's SLA. The dashed line is the per-user "
                   "target; the diamond is the chosen level (a confirmed study's "
                   "choice rests on its confirmations)." + thinned)

    if best is None:
        st.warning(ranking.reason or "No configuration meets the targets.")
        return
    run = "its confirmation" if best.confirmed else "its first run"
    cols = st.columns(4)
    cols[0].metric("USD per million output tokens", ui.money(best.usd_per_mtok))
    # The winner's figures in its own study's unit; the hardware label in the page's.
    cols[1].metric(ui.column_in_unit(dd.TOK_GPU, ui.device_unit(best.study.gpu_type)),
                   ui.fmt(best.tok_s_per_gpu))
    cols[2].metric("tok/s per user p90", ui.fmt(best.level.tok_s_per_user_p90, 1))
    cols[3].metric(ui.column_in_unit(dd.HARDWARE, unit),
                   f"{best.study.gpu_type} · {best.study.engine}")
    st.caption(f"Study {best.study.name}, trial {best.trial.number}, at concurrency "
               f"{best.level.concurrency} of {run}.")
    data = ui.study(storage, best.study.name, version)
    card = ui.trial_card(storage, best.study.name, best.trial.number, version)
    if card is not None and data is not None:
        title = "Cheapest meeting the targets" if by == "cost" else "Fastest meeting the targets"
        ui.draw_best_card(card, data, key="choose", title=title, icon=":material/paid:")

    st.subheader("Runners-up")
    table = ranking.table.iloc[1:].copy()
    if table.empty:
        st.caption("No other configuration meets the targets.")
        return
    table[dd.GAP] = pd.to_numeric(table[dd.GAP], errors="coerce") * 100
    gap = st.column_config.NumberColumn(
        "gap to winner", format="%+.1f%%",
        help=ui.say("Costlier than the winner by (rank by cost), or slower per GPU by "
                    "(throughput).", unit))
    ui.table(table, unit, config={dd.GAP: gap}, width="stretch")


render()
