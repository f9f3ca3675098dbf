"""Pareto studies: two objectives (output tok/s per GPU, per-user tok/s) searched by Optuna under
the SLA, and a configuration picked from the front for a per-user target, against the fake
engine with a load model (per-user speed falls as concurrency rises)."""

from __future__ import annotations

import json

import optuna
import pytest

from tests.conftest import call_tuner
from tests.search.test_loop import landscape_study
from tuner.search import loop
from tuner.search.bridge import load_or_create_study
from tuner.spec.errors import NoResult
from tuner.spec.study_spec import ObjectiveSpec
from tuner.verdict.rules import operating_points, pareto_front, pick_for_user

# Batch 4 is quick per user when lightly loaded and slows as load grows; batch 16 starts slower
# and holds up: at c=16 it has the throughput, at c=1 batch 4 has the per-user speed.
LANDSCAPE = {"default": {"ttft_s": 0.01, "itl_s": 0.01, "itl_per_in_flight_s": 0.01},
             "rules": [{"match": {"max-num-seqs": 16}, "itl_s": 0.05,
                        "itl_per_in_flight_s": 0.001}]}


def test_objective_pareto_is_short_for_the_pareto_kind():
    assert ObjectiveSpec.model_validate("pareto").pareto
    assert not ObjectiveSpec.model_validate({}).pareto


@pytest.fixture(scope="module")
def pareto_study(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("pareto")
    ctx = landscape_study(tmp_path, LANDSCAPE, [4, 16], n_trials=2, concurrency=(1, 4, 16),
                          workload={"requests_per_level": 16})
    ctx.spec.objective = ObjectiveSpec(kind="pareto")
    loop.run_study(ctx, n_trials=2)
    yield tmp_path, ctx
    ctx.store.close()


def test_a_pareto_study_tells_optuna_both_objectives_and_keeps_both_configurations(pareto_study):
    _, ctx = pareto_study
    study = load_or_create_study(ctx)
    assert len(study.directions) == 2
    front = {t.params["max_batch_size"] for t in study.best_trials}
    assert front == {4, 16}  # batch 4 reaches more per user, batch 16 more per GPU
    reach = {t.params["max_batch_size"]: t.values for t in study.trials}
    assert reach[4][1] > reach[16][1] and reach[16][0] > reach[4][0]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)


def test_the_pick_for_a_per_user_target_is_the_fastest_front_point_that_reaches_it(pareto_study):
    _, ctx = pareto_study
    trials = ctx.store.trials(ctx.name)
    study = ctx.store.get_study(ctx.name)
    front = pareto_front(operating_points(trials))
    assert [m.output_tok_s_per_gpu for _, m in front] == sorted(
        (m.output_tok_s_per_gpu for _, m in front), reverse=True)
    fast, fast_level = pick_for_user(study, trials, 10.0)
    slow, slow_level = pick_for_user(study, trials, 30.0)
    assert (fast.params["max_batch_size"], fast_level.concurrency) == (16, 16)
    assert slow.params["max_batch_size"] == 4 and slow_level.tok_s_per_user_p90 >= 30.0
    with pytest.raises(NoResult, match="no level of study .* reached it"):
        pick_for_user(study, trials, 10_000.0)


def test_export_writes_the_front_s_pick_and_its_measured_point_meets_the_target(pareto_study):
    tmp_path, ctx = pareto_study
    picked = {}
    for target in (10, 30):
        out = tmp_path / f"export-{target}"
        done = call_tuner("export", "--storage", ctx.storage_url, "--min-tok-s-per-user",
                          target, "--out", out, cwd=tmp_path)
        assert done.code == 0, done.stderr
        record = json.loads((out / "best.json").read_text())
        assert record["schema_version"] == 8
        assert record["objective"]["min_tok_s_per_user"] == target
        assert record["objective"]["tok_s_per_user_p90"] >= target
        assert record["objective"]["meets_sla"]
        picked[target] = record["parameters"]["max_batch_size"]
    assert picked == {10: 16, 30: 4}
    unreachable = call_tuner("best", "--storage", ctx.storage_url, "--min-tok-s-per-user",
                             10_000, cwd=tmp_path)
    assert unreachable.code == 3
    assert "--min-tok-s-per-user 10000: no level" in unreachable.stderr


def test_the_dashboard_draws_the_front_the_pick_is_made_from(pareto_study):
    from tuner.report import dashboard_data as dd

    _, ctx = pareto_study
    data = dd.read_study(ctx.store, ctx.name)
    drawn = dd.pareto_front(dd.measured_points(data)).front
    picked_from = pareto_front(operating_points(ctx.store.trials(ctx.name)))
    assert sorted(zip(drawn["trial"], drawn["concurrency"], strict=True)) == sorted(
        (t.number, m.concurrency) for t, m in picked_from)
