"""One trial: its configuration, the launch plan it ran with, one row per concurrency level, its
answers against the quality gate's reference (the differing ones side by side) and the server
log's tail."""

import pandas as pd
import streamlit as st
import tuner_ui as ui

from tuner.report import dashboard_data as dd


@ui.page
def render() -> None:
    ui.store_or_explain()
    storage, version = ui.url(), ui.version()
    ui.follow_changes(version)
    names = ui.study_names(storage, version)
    if not names:
        st.title("Trial")
        st.info("No study yet in this database. Run one with `tuner run STUDY.yaml`.")
        return
    name = st.sidebar.selectbox("Study", names, index=len(names) - 1, key="study",
                                bind="query-params")
    data = ui.study(storage, name, version)
    if data is None or not data.trials:
        st.info(f"Study {name} has no trial yet.")
        return
    by_number = {t.number: t for t in data.trials}
    best = dd.best_of(data)
    numbers = list(by_number)
    default = numbers.index(best.number) if best is not None else len(numbers) - 1
    number = st.sidebar.selectbox("Trial", numbers, index=default, key="trial",
                                  bind="query-params", format_func=str)
    st.page_link("views/study.py", label=f"Study {name}", icon=":material/arrow_back:",
                 query_params={"study": name})
    trial = by_number[number]
    unit = ui.unit_of(data)

    star = " · best of the study" if best is not None and best.number == trial.number else ""
    st.title(f"Trial {trial.number} of {name}  {ui.state_badge(trial.state)}")
    st.markdown(f"`{dd.describe(trial.params)}`{star}")
    reason = ui.say(trial.failure_reason or "no reason recorded", unit)
    if trial.state in ("failed", "infeasible"):
        st.error(f"**{trial.failure_kind or trial.state}**: {reason}")
    elif trial.state == "pruned":
        st.warning(f"**pruned**: {reason}")
    elif trial.state == "running":
        st.info("This trial is running: its figures appear when it finishes.")
    for skipped in trial.skipped_levels:
        where = (f"{skipped['request_rate']:g} req/s" if skipped.get("request_rate") is not None
                 else f"c={skipped['concurrency']}")
        st.caption(ui.say(f"{where} {skipped['reason']}", unit))
    if trial.load_search is not None:
        st.caption(ui.say(f"load search: {trial.load_search}", unit))

    cols = st.columns(5)
    # The figure that decided its verdict, as the Study and Choose pages and `tuner best` give
    # it; its other run beside it, labelled.
    shown = dd.figure(trial, data.study)
    cols[0].metric(ui.column_in_unit(dd.TOK_GPU, unit), ui.fmt(shown.value),
                   help=f"From its {shown.source}: the run that decided its verdict.")
    cols[1].metric("SLA", {None: "–", True: "met", False: "missed"}[trial.meets_sla])
    cols[2].metric(ui.column_in_unit("GPUs", unit), ui.fmt(trial.gpus))
    cols[3].metric("engine", f"{data.study.engine} {trial.engine_version or ''}".strip())
    duration = ((trial.finished_at - trial.started_at).total_seconds()
                if trial.finished_at else None)
    cols[4].metric("duration", "–" if duration is None else f"{duration:,.0f} s")
    if shown.other_text():
        st.caption(ui.say(f"{ui.column_in_unit(dd.TOK_GPU, unit)} from its {shown.source}; "
                          f"its {shown.other_text()}", unit))

    left, right = st.columns(2, gap="large")
    with left:
        st.subheader("Configuration")
        values = ["–" if v is None else str(dd.param_value(v)) for v in trial.params.values()]
        ui.table(pd.DataFrame({"parameter": list(trial.params), "value": values}), unit,
                 width="stretch")
        hw = trial.hardware or {}
        st.caption(f"host {trial.worker_host or '–'} (pid {trial.worker_pid or '–'}) · "
                   f"{hw.get('description', data.study.gpu_type)} · started "
                   f"{trial.started_at:%Y-%m-%d %H:%M:%S} UTC")
    with right:
        st.subheader("Launch plan")
        plan = dd.launch_view(trial)
        if plan is None:
            st.info("No launch plan: this trial was rejected before launch."
                    if trial.state == "infeasible" else
                    "No launch plan was recorded for this trial.")
        else:
            st.markdown(f"**Command** (served on {plan.where})")
            st.code(plan.command, language="bash", wrap_lines=True)
            if plan.env:
                st.markdown("**Environment**")
                st.code("\n".join(f"{k}={v}" for k, v in plan.env.items()), language="bash")
            for fname, content in plan.files.items():
                st.markdown(f"**{fname}**")
                st.code(content, language="yaml")

    st.subheader("Measurements, one row per level")
    if trial.measurements:
        ui.table(dd.levels_frame(trial, study=data.study), unit, width="stretch")
        curves = dd.load_curves(dd.StudyData(data.study, [trial]))
        if curves is not None and len(curves.frame) > 1:
            y = st.radio("Load curve", [dd.TOK_GPU, "TTFT p90 ms", dd.USER_P90],
                         horizontal=True, key="curve_y",
                         format_func=lambda c: ui.column_in_unit(c, unit))
            st.altair_chart(ui.load_curve_chart(curves, y, unit=unit, height=280),
                            width="stretch")
    else:
        st.info("No level was measured.")
    if trial.quality is not None:
        q = trial.quality
        st.subheader("Quality, its answers against the study's reference")
        cols = st.columns(4)
        if q.identical is None:  # a check stored before the tie-aware gate
            cols[0].metric("exact match", f"{q.exact_match_rate:.0%}")
            cols[1].metric("common prefix", f"{q.common_prefix_share:.0%}")
        else:
            cols[0].metric("identical", f"{q.identical} of {q.prompts}")
            cols[1].metric("near-ties", q.near_ties,
                           help="Flipped where the two tokens were within the spec's margin "
                           "on both sides: numerics, not an error. Never fails the gate alone.")
            cols[2].metric("diverging", q.diverging)
        cols[3].metric("logprob divergence", "–" if q.mean_logprob_divergence is None
                       else f"{q.mean_logprob_divergence:.3g} nats")
        st.caption(f"{'passed' if q.passed else 'failed'}: {dd.quality_figures(q)}; the gate "
                   f"took {q.gate_s:.1f} s" + (f". Rule {q.rule}" if q.rule else ""))
        flips = dd.quality_flips(trial)
        if flips:
            for col, view in zip(st.columns(len(flips)), flips, strict=True):
                col.markdown(f"**{view.title}**")
                col.caption(view.line)
                ui.table(view.frame, unit, where=col, width="stretch")
        differ = dd.quality_answers(data, trial)
        if len(differ):
            st.markdown(f"**{len(differ)} answer(s) differ from the reference**")
            ui.table(differ, unit, width="stretch")
    rounds = dd.head_to_head_frame(data.study, trial)
    if rounds is not None:
        st.subheader("Head-to-head, the finalists' rounds over time")
        st.caption(ui.say(" · ".join(dd.head_to_head_lines(data.study)), unit))
        st.altair_chart(ui.head_to_head_chart(rounds, unit=unit), width="stretch")
    if trial.confirm_state is not None:
        st.subheader("Confirmation, the same configuration in a fresh server")
        st.caption(ui.say(dd.confirmation_text(trial), unit))
        if trial.confirmation:
            ui.table(dd.levels_frame(trial, confirmation=True, study=data.study), unit,
                     width="stretch")

    if trial.state == "complete":
        card = dd.best_card(data, trial)
        if card is not None and trial.meets_sla:
            is_best = best is not None and best.number == trial.number
            ui.draw_best_card(card, data, key=f"trial-{trial.number}", link=False,
                              title="Best configuration" if is_best else "Take it away",
                              icon=":material/emoji_events:" if is_best
                              else ":material/download:")

    st.subheader("Server log")
    text, source = dd.log_tail(data.study, trial, storage)
    st.caption(source)
    if text:
        st.code(text, language=None, height=360)


render()
