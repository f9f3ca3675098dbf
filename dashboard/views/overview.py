"""Every study in the database: what it tuned, how far it got, its best figure."""

import streamlit as st
import tuner_ui as ui

from tuner.report import dashboard_data as dd


@ui.page
def render() -> None:
    store = ui.store_or_explain()
    storage, version = ui.url(), ui.version()
    st.title("Studies")
    ui.follow_changes(version)
    st.caption(f"Database `{store.where}` · read-only · re-read whenever a study writes to it")
    datas = ui.studies(storage, version)
    if not datas:
        st.info("No study yet in this database. Run one with `tuner run STUDY.yaml` "
                "(`make demo` runs a 6-trial study on this machine's CPU); it appears here as "
                "soon as its first trial starts.")
        return
    summaries = [dd.summarize(d) for d in datas]
    frame = dd.overview_frame(summaries)
    total = sum(sum(s.counts.values()) for s in summaries)
    running = sum(s.counts["running"] for s in summaries)
    cols = st.columns(4)
    cols[0].metric("studies", len(summaries))
    cols[1].metric("trials", f"{total:,}")
    cols[2].metric("running now", running)
    with_best = [s for s in summaries if s.best is not None]
    cols[3].metric("studies with a result", f"{len(with_best)} of {len(summaries)}")

    frame.insert(0, "open", [dd.page_url("study", study=s.name) for s in summaries])
    # Per GPU, per core (a CPU node) or, where the studies run on both, per device.
    unit = ui.unit_of(*datas)
    config = {"open": st.column_config.LinkColumn("", display_text="open", width="small"),
              "budget": st.column_config.NumberColumn("budget", help="The spec's n_trials.")}
    ui.table(frame, unit, config=config, width="stretch")
    st.caption(ui.say("complete / failed / infeasible / running count trials; the best figure "
                      "is the highest output tok/s per GPU among trials that met the study's "
                      "SLA.", unit))

    st.subheader("Open a study")
    for d, s in list(zip(datas, summaries, strict=True))[:50]:
        best = (ui.say(f"best {ui.fmt(s.best_value)} tok/s/GPU (trial {s.best.number})",
                       ui.unit_of(d)) if s.best else "no trial met the SLA yet")
        st.page_link("views/study.py", label=f"{s.name} · {s.model} · {s.gpu_type} · {best}",
                     icon=":material/insights:", query_params={"study": s.name})
    if len(summaries) >= 2:
        st.page_link("views/compare.py", label="Compare studies on one Pareto chart",
                     icon=":material/compare_arrows:")


render()
