"""A real `concurrency: auto` study on vLLM's CPU build: each trial searches its load up to the
most requests its configuration runs at once, stores every level it measured (its curve) and the
highest load that met the SLA, and the dashboard draws the curves."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, run_tuner, write_yaml
from tuner.report import dashboard_data as dd
from tuner.spec.yamlio import read_yaml

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]

# Two configurations, max-num-seqs 2 and 4 on one rank: the search's bound is 2 and 4.
SPACE = {"name": "auto", "engine": "vllm", "parameters": {
    "tensor_parallel_size": {"values": [1]}, "max_batch_size": {"values": [2, 4]}}}


def test_a_concurrency_auto_study_stores_each_trials_curve_and_its_load_at_the_sla(
        tmp_path, tiny_model, monkeypatch):
    write_yaml(tmp_path / "space.yaml", SPACE)
    spec = read_yaml(REPO / "examples" / "tiny-moe-auto-cpu.yaml", "study spec")
    spec.update(search_space="space.yaml", model={"path": str(tiny_model)},
                sampler={"name": "grid", "seed": 0},
                # Both trials at once, a core each: a load search is per trial.
                budget={"n_trials": 2, "parallel_trials": 2, "trial_timeout_s": 400,
                        "confirm_top_k": 0},
                sla={"ttft_p90_ms": 5000, "min_tok_s_per_user_p90": 1},  # met up to the bound
                # The quality gate's reference server is tested in test_e2e_quality.py.
                quality={"enabled": False})
    spec["engine"]["args"]["max-model-len"] = 256
    spec["workload"].update(input_len=32, output_len=32, requests_per_level=12, max_rounds=1,
                            warmup_requests=2)
    write_yaml(tmp_path / "study.yaml", spec)
    proc = run_tuner("run", "study.yaml", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "load search: c=4 met the SLA at the search's bound" in proc.stdout

    url = f"sqlite:///{tmp_path}/tuner.db"
    data = dd.read_study(dd.open_store(url), "tiny-moe-auto-cpu")
    trials = {t.params["max_batch_size"]: t for t in data.trials}
    for batch, curve in ((2, [1, 2]), (4, [1, 2, 4])):
        t = trials[batch]
        assert t.state == "complete" and t.meets_sla, t.failure_reason
        assert [m.concurrency for m in t.measurements] == curve  # doubling to the bound
        assert all(m.meets_sla and m.errors == 0 for m in t.measurements)
        assert t.load_at_sla == batch
        assert t.load_search == (f"c={batch} met the SLA at the search's bound (max batch x "
                                 f"ranks: {batch} in flight)")
        assert t.objective == max(m.output_tok_s_per_gpu for m in t.measurements)

    curves = dd.load_curves(data)
    by_trial = curves.frame.groupby("trial")["load"].apply(list).to_dict()
    assert by_trial == {t.number: [m.concurrency for m in t.measurements] for t in data.trials}
    assert sorted(curves.frame.loc[curves.frame["at SLA"], "load"]) == [2, 4]

    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv(dd.STORAGE_ENV, url)
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=60)
    at.run()
    at.query_params.update(study="tiny-moe-auto-cpu")
    at.switch_page("views/study.py")
    at.run()
    at.session_state["view"] = "Load curves"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("vega_lite_chart")) >= 2  # the Pareto chart and the load curves
    assert sorted(at.dataframe[-1].value[dd.LOAD_AT_SLA].tolist()) == [2, 4]
