"""The study loop with its serving path replaced by a scripted one: what it launches, in what
order, and what it tells Optuna."""

from __future__ import annotations

from pathlib import Path

import optuna

from tests.plan.test_plan import _context, small_spec
from tuner.search import loop
from tuner.search.bridge import load_or_create_study
from tuner.search.rules import config_key
from tuner.search.trial import TrialResult


def scripted(launched: list[dict]):
    def run_trial(ctx, study, trial, params, devices=None):
        launched.append(params)
        trial_id = ctx.store.start_trial(ctx.name, trial.number, params, worker_host="h",
                                         worker_pid=1, budget=ctx.budget)
        value = 1000.0 + len(launched)
        ctx.store.finish_trial(trial_id, state="complete", objective=value, meets_sla=True)
        study.tell(trial, value)
        return TrialResult(trial.number, params, "complete", value, True)
    return run_trial


def test_the_startup_trials_are_configurations_that_launch(tmp_path: Path, monkeypatch):
    # A third of the space runs only on Blackwell: random startup samples would hit it.
    ctx = _context(small_spec(tmp_path), [])
    assert ctx.spec.sampler.n_startup_trials == ctx.spec.budget.n_trials == 3
    launched: list[dict] = []
    monkeypatch.setattr(loop, "run_trial", scripted(launched))

    loop.run_study(ctx, n_trials=3)

    assert len({config_key(p) for p in launched}) == 3
    assert all(ctx.infeasible(p) is None for p in launched)
    study = load_or_create_study(ctx)
    assert len(study.get_trials()) == 3  # every startup ask launched a server
    assert [t.state for t in ctx.store.trials(ctx.name)] == ["complete"] * 3
    ctx.store.close()


def test_tpe_models_the_parameters_jointly():
    sampler = load_sampler()
    assert isinstance(sampler, optuna.samplers.TPESampler)
    assert sampler._multivariate and sampler._group and sampler._n_startup_trials == 0


def load_sampler():
    from tuner.search.bridge import make_sampler
    from tuner.spec.study_spec import load_spec

    return make_sampler(load_spec(Path(__file__).resolve().parents[2] / "examples"
                                  / "gpt-oss-120b.yaml"), 7)
