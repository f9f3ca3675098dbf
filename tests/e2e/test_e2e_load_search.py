"""A real `concurrency: auto` study on vLLM's CPU build (conftest's `real_study`, from the
shipped example): each TP1 trial searches its load up to the most requests its configuration runs at
once, stores every level it measured (its curve) and the highest load that met the SLA, and the
dashboard draws the curves."""

from __future__ import annotations

import pytest

from tests.conftest import BATCH_LIMITS, REPO
from tuner.report import dashboard_data as dd

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]

# Doubling from load_search.start (1) to the bound, max-num-seqs on one rank.
CURVES = {2: [1, 2], 4: [1, 2, 4]}


def test_a_concurrency_auto_study_stores_each_trials_curve_and_its_load_at_the_sla(
        real_study, monkeypatch):
    out = (real_study.folder / "run.out").read_text()
    for batch in BATCH_LIMITS:
        assert f"load search: c={batch} met the SLA at the search's bound" in out

    url = f"sqlite:///{real_study.folder}/tuner.db"
    data = dd.read_study(dd.open_store(url), real_study.name)
    trials = {t.params["max_batch_size"]: t for t in data.trials if t.state == "complete"}
    assert sorted(trials) == BATCH_LIMITS
    for batch, curve in CURVES.items():
        t = trials[batch]
        assert t.state == "complete" and t.meets_sla, t.failure_reason
        assert [m.concurrency for m in t.measurements] == curve
        assert all(m.meets_sla and m.errors == 0 for m in t.measurements)
        assert t.load_at_sla == batch
        assert t.load_search == (f"c={batch} met the SLA at the search's bound (max batch x "
                                 f"ranks: {batch} in flight)")
        assert t.objective == max(m.output_tok_s_per_gpu for m in t.measurements)

    curves = dd.load_curves(data)
    by_trial = curves.frame.groupby("trial")["load"].apply(list).to_dict()
    assert by_trial == {t.number: [m.concurrency for m in t.measurements]
                        for t in data.trials if t.measurements}
    assert sorted(curves.frame.loc[curves.frame["at SLA"], "load"]) == BATCH_LIMITS

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(dd.STORAGE_ENV, url)
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=60)
    at.run()
    at.query_params.update(study=real_study.name)
    at.switch_page("views/study.py")
    at.run()
    at.session_state["view"] = "Load curves"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("vega_lite_chart")) >= 2  # the Pareto chart and the load curves
    assert sorted(at.dataframe[-1].value[dd.LOAD_AT_SLA].tolist()) == BATCH_LIMITS
