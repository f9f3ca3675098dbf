"""Two or more studies (H200 against B200, one engine against another) on one Pareto chart and
in one table."""

import streamlit as st
import tuner_ui as ui

from tuner.report import dashboard_data as dd


@ui.page
def render() -> None:
    ui.store_or_explain()
    storage, version = ui.url(), ui.version()
    st.title("Compare studies")
    ui.follow_changes(version)
    names = ui.study_names(storage, version)
    if len(names) < 2:
        st.info(f"Comparing needs two or more studies; this database holds {len(names)}. "
                "Run another study (on other hardware, another engine or search space) into "
                "the same database with `tuner run SPEC.yaml --storage URL`.")
        return
    chosen = st.multiselect("Studies", names, default=names[-4:], key="studies",
                            bind="query-params", placeholder="choose two or more")
    if len(chosen) < 2:
        st.info("Choose two or more studies to compare.")
        return
    datas = [d for d in (ui.study(storage, n, version) for n in chosen) if d is not None]
    summaries = [dd.summarize(d) for d in datas]
    unit = ui.unit_of(*datas)  # per device where GPU and CPU studies are compared

    c1, c2, _ = st.columns([2, 1, 3], vertical_alignment="bottom")
    x = c1.segmented_control("per-user speed", [dd.USER_P90, dd.USER_P50], default=dd.USER_P90,
                             key="compare_x") or dd.USER_P90
    log_x = c2.toggle("log x", value=True, key="compare_log")
    front = dd.compare_points(datas, x=x)
    if front.points.empty:
        st.info("None of these studies has a measured concurrency level yet.")
    else:
        floors = {s.name: dd.sla_user_floor(s.sla) for s in summaries}
        same = len(set(floors.values())) == 1
        chart = ui.pareto_chart(front, x=x, color="study", front_by="study", log_x=log_x,
                                sla_floor=next(iter(floors.values())) if same else None,
                                unit=unit, height=480)
        st.altair_chart(chart, width="stretch")
        note = ("The dashed line is the studies' common per-user SLA floor."
                if same and floors and next(iter(floors.values())) and x == dd.USER_P90
                else "The studies' SLAs differ: " + "; ".join(
                    f"{n}: {dd.sla_text(s.sla)}" for n, s in zip(floors, summaries, strict=True))
                if not same else "")
        drawn = ui.pareto_points(front, x=x, log_x=log_x)
        st.caption(f"{ui.plural(len(drawn), 'measured level')} of {len(datas)} studies drawn, "
                   "one point per trial and concurrency level; each study's Pareto front is "
                   "its line. Filled: the level met its study's SLA. " + note)

    st.subheader("Best of each study")
    table = dd.compare_frame(datas)
    table.insert(0, "open", [dd.page_url("study", study=d.study.name) for d in datas])
    open_link = st.column_config.LinkColumn("", display_text="open", width="small")
    ui.table(table, unit, config={"open": open_link}, width="stretch")
    for s in summaries:
        if s.best is None:
            st.caption(f"{s.name}: no trial met the SLA yet.")


render()
