"""The study loop with its serving path replaced by a scripted one: what it launches, in what
order, and what it tells Optuna."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import optuna

from tests.conftest import base_spec, write_yaml
from tests.plan.test_plan import _context, small_spec
from tuner.measure.metrics import UNUSABLE_VIOLATION
from tuner.search import loop
from tuner.search.bridge import load_or_create_study
from tuner.search.context import StudyContext, prepare
from tuner.search.trial import TrialResult
from tuner.serve.failures import read_log_tail
from tuner.spec.study_spec import load_spec
from tuner.testing.fake_engine import fake_engine_section, fake_model
from tuner.verdict import rules
from tuner.verdict.rules import config_key


def scripted(launched: list[dict]):
    def run_trial(ctx, study, trial, params, devices=None):
        launched.append(params)
        trial_id = ctx.store.start_trial(ctx.name, trial.number, params, worker_host="h",
                                         worker_pid=1, budget=ctx.run.budget)
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


# ---------------------------------------------------------------- the real loop, a fake engine


def landscape_study(tmp_path: Path, landscape: dict, values: list[int], n_trials: int,
                    concurrency: tuple[int, ...] = (2,), workload: dict | None = None,
                    **budget) -> StudyContext:
    """A study of `max_batch_size` over `values` on this node, served by the fake engine
    (`workload` adds to or overrides its small sweep)."""
    (tmp_path / "landscape.json").write_text(json.dumps(landscape))
    write_yaml(tmp_path / "space.yaml", {"name": "batch", "engine": "vllm", "parameters": {
        "max_batch_size": {"values": values}}})
    spec = base_spec(fake_model(tmp_path / "model"), space="space.yaml",
                     hardware={"gpu_type": "cpu", "devices": 1},
                     workload={"input_len": 8, "output_len": 8, "concurrency": list(concurrency),
                               "requests_per_level": 8, "warmup_requests": 1,
                               **(workload or {})},
                     sla={"ttft_p90_ms": 1000},
                     budget={"n_trials": n_trials, "trial_timeout_s": 60, "confirm_top_k": 0,
                             **budget},
                     storage=f"sqlite:///{tmp_path / 'tuner.db'}", runs_dir=str(tmp_path / "runs"))
    spec["engine"] = fake_engine_section(tmp_path, ready_timeout_s=10)
    path = write_yaml(tmp_path / "study.yaml", spec)
    return prepare(load_spec(path), path, storage_url=None, study_name=None, say=lambda _: None)


def test_a_study_of_real_trials_against_the_fake_engine_records_crashes_and_speeds(tmp_path):
    # Batch 16 serves a request in a twelfth of batch 4's time (5 + 7 x 1 ms against 10 + 7 x
    # 20 ms), a margin no busy machine closes.
    landscape = {"default": {"ttft_s": 0.01, "itl_s": 0.02},
                 "rules": [{"match": {"max-num-seqs": 8}, "fail": "crash"},
                           {"match": {"max-num-seqs": 16}, "ttft_s": 0.005, "itl_s": 0.001}]}
    ctx = landscape_study(tmp_path, landscape, [4, 8, 16], n_trials=3)

    loop.run_study(ctx, n_trials=3)

    trials = {t.params["max_batch_size"]: t for t in ctx.store.trials(ctx.name)}
    assert trials[8].state == "failed" and trials[8].failure_kind == "crash"
    assert "Segfault" in trials[8].failure_reason
    assert trials[4].state == trials[16].state == "complete"
    assert trials[16].objective > trials[4].objective
    # Every trial keeps its server log's tail in the database, complete ones too.
    assert all(t.log_tail and t.log_tail == read_log_tail(t.log_path) for t in trials.values())
    study = load_or_create_study(ctx)
    crashed = next(t for t in study.trials if t.params.get("max_batch_size") == 8)
    assert crashed.state == optuna.trial.TrialState.COMPLETE  # ranked, not ignored
    assert crashed.constraints == {"failed": UNUSABLE_VIOLATION}
    ctx.store.close()


def test_a_transient_failure_is_retried_once_on_a_fresh_server_before_it_counts(tmp_path):
    landscape = {"default": {"ttft_s": 0.01, "itl_s": 0.002}, "rules": [
        {"match": {"max-num-seqs": 8}, "fail": "not_ready", "fail_starts": 1},  # flaky node
        {"match": {"max-num-seqs": 16}, "fail": "not_ready"}]}  # never ready: its own fault
    ctx = landscape_study(tmp_path, landscape, [4, 8, 16], n_trials=5)
    ctx.spec.engine.ready_timeout_s = 2

    loop.run_study(ctx, n_trials=5)

    runs: dict[int, list] = {}
    for t in ctx.store.trials(ctx.name):
        runs.setdefault(t.params["max_batch_size"], []).append((t.state, t.failure_kind))
    assert runs == {4: [("complete", None)],
                    8: [("failed", "not_ready"), ("complete", None)],
                    16: [("failed", "not_ready"), ("failed", "not_ready")]}
    told = {}
    for t in load_or_create_study(ctx).trials:
        if "repeat_of" in t.user_attrs:  # a repeat of a settled configuration: nothing ran
            continue
        told.setdefault(t.params["max_batch_size"], []).append(t.state.name)
    # The sampler learns from each retry, not from the first, transient failure.
    assert told[8] == ["FAIL", "COMPLETE"] and told[16] == ["FAIL", "COMPLETE"]
    ctx.store.close()


def test_the_sweep_stops_at_the_first_level_a_server_no_longer_serves(tmp_path):
    landscape = {"default": {"ttft_s": 0.01, "itl_s": 0.002},
                 "rules": [{"match": {"max-num-seqs": 8}, "fail": "http500"}]}
    ctx = landscape_study(tmp_path, landscape, [8], n_trials=1, concurrency=(2, 4, 8))

    loop.run_study(ctx, n_trials=1)

    (trial,) = ctx.store.trials(ctx.name)
    assert (trial.state, trial.failure_kind) == ("failed", "request_errors")
    assert "every request failed at c=2" in trial.failure_reason
    assert [m.concurrency for m in trial.measurements] == [2]  # c=4 and c=8 were not sent
    ctx.store.close()


def test_a_grid_study_runs_every_feasible_configuration_once_and_stops(tmp_path):
    landscape = {"default": {"ttft_s": 0.01, "itl_s": 0.002}}
    ctx = landscape_study(tmp_path, landscape, [4, 8, 16], n_trials=10)
    ctx.spec.sampler.name = "grid"
    said: list[str] = []
    ctx = replace(ctx, say=said.append)

    loop.run_study(ctx, n_trials=10)

    launched = sorted(t.params["max_batch_size"] for t in ctx.store.trials(ctx.name))
    assert launched == [4, 8, 16]
    assert "every feasible configuration of the space has been tried" in said
    assert isinstance(load_or_create_study(ctx).sampler, optuna.samplers.GridSampler)
    ctx.store.close()


def test_levels_above_one_that_missed_a_latency_target_are_skipped_and_say_why(tmp_path):
    landscape = {"default": {"ttft_s": 0.3, "itl_s": 0.002}}  # over the 200 ms TTFT target
    ctx = landscape_study(tmp_path, landscape, [8], n_trials=1, concurrency=(2, 4, 8))
    ctx.spec.sla.ttft_p90_ms = 200

    loop.run_study(ctx, n_trials=1)

    (trial,) = ctx.store.trials(ctx.name)
    assert (trial.state, trial.meets_sla) == ("complete", False)  # a miss, not a failure
    assert [m.concurrency for m in trial.measurements] == [2]
    assert [(s["level"], s["concurrency"]) for s in trial.skipped_levels] == [(1, 4), (2, 8)]
    assert all("c=2 missed its TTFT p90" in s["reason"] and "higher load cannot meet it"
               in s["reason"] for s in trial.skipped_levels)
    ctx.store.close()


def test_levels_above_one_that_ran_the_full_batch_are_skipped_and_say_why(tmp_path):
    # Past max batch x ranks, more clients only wait for a batch slot: the same throughput,
    # with the queue in every TTFT.
    ctx = landscape_study(tmp_path, {"default": {"ttft_s": 0.005, "itl_s": 0.001}}, [4, 16],
                          n_trials=2, concurrency=(2, 4, 8, 16))
    said: list[str] = []
    ctx = replace(ctx, say=said.append)
    study = load_or_create_study(ctx)
    for batch in (4, 16):
        study.enqueue_trial({"max_batch_size": batch})

    loop.run_study(ctx, n_trials=2)

    trials = {t.params["max_batch_size"]: t for t in ctx.store.trials(ctx.name)}
    small, large = trials[4], trials[16]
    assert small.state == "complete"
    assert [m.concurrency for m in small.measurements] == [2, 4]
    assert [(s["level"], s["concurrency"]) for s in small.skipped_levels] == [(2, 8), (3, 16)]
    assert all("c=4 already ran this configuration's full batch (max batch x ranks: 4 in "
               "flight)" in s["reason"] for s in small.skipped_levels)
    assert [m.concurrency for m in large.measurements] == [2, 4, 8, 16]
    assert large.skipped_levels == []
    assert any(line.strip().startswith("c=8, c=16 not measured: c=4 already ran") for line in said)
    ctx.store.close()


def test_a_trial_clearly_below_the_incumbent_stops_its_rounds_and_is_pruned(tmp_path):
    # max-num-seqs 16 streams forty times faster than 4; 16 runs first and is the incumbent.
    landscape = {"default": {"ttft_s": 0.01, "itl_s": 0.02},
                 "rules": [{"match": {"max-num-seqs": 16}, "itl_s": 0.0005}]}
    ctx = landscape_study(tmp_path, landscape, [4, 16], n_trials=2,
                          workload={"max_rounds": 5, "ci_target": 0.0001})
    study = load_or_create_study(ctx)
    for values in (16, 4):
        study.enqueue_trial({"max_batch_size": values})

    loop.run_study(ctx, n_trials=2)

    trials = {t.params["max_batch_size"]: t for t in ctx.store.trials(ctx.name)}
    assert trials[16].state == "complete" and trials[16].measurements[0].rounds == 5
    slow = trials[4]
    assert slow.state == "pruned" and slow.measurements[0].rounds == 2  # not 5
    assert "clearly below the incumbent" in slow.failure_reason
    assert ctx.store.budget_used(ctx.name) == 2  # it launched: it spent the budget
    told = {t.params["max_batch_size"]: t for t in load_or_create_study(ctx).trials}
    assert told[4].state == optuna.trial.TrialState.PRUNED
    assert list(told[4].intermediate_values) == [0]  # reported once, after its second round
    assert rules.winner(ctx.store.get_study(ctx.name), list(trials.values())).number == \
        trials[16].number
    ctx.store.close()


def test_a_level_cut_by_the_trials_time_limit_keeps_its_rounds_and_its_interval(tmp_path):
    # Rounds of 8 requests of about 0.1 s each that never reach a 0.01% target: the trial's
    # time limit, not max_rounds, ends the level.
    landscape = {"default": {"ttft_s": 0.005, "itl_s": 0.01}}
    ctx = landscape_study(tmp_path, landscape, [4], n_trials=1,
                          workload={"max_rounds": 1000, "ci_target": 0.0001},
                          trial_timeout_s=8)
    loop.run_study(ctx, n_trials=1)
    (trial,) = ctx.store.trials(ctx.name)
    (level,) = trial.measurements
    assert trial.state == "complete", trial.failure_reason  # its one level was measured
    assert 2 <= level.rounds < 1000 and level.converged is False
    assert level.output_tok_s_ci95 is not None  # the rounds it had, with their interval
    from tuner.measure.metrics import convergence_note

    assert convergence_note(level, 0.0001, 1000).startswith(
        f"not converged: stopped after {level.rounds} of 1000 rounds (cut short")
    ctx.store.close()


def test_no_trial_starts_that_would_not_end_with_the_head_to_head_in_the_time_limit(
        tmp_path: Path, monkeypatch):
    import types

    import yaml

    from tuner.search.time_plan import Costs

    spec_path = small_spec(tmp_path)
    spec = yaml.safe_load(spec_path.read_text())
    spec["budget"].update(n_trials=6, timeout_min=10)
    write_yaml(spec_path, spec)
    said: list[str] = []
    ctx = _context(spec_path, said)
    launched: list[dict] = []
    clock = [0.0]
    run = scripted(launched)

    def trial_of_100_s(*args, **kwargs):
        clock[0] += 100.0
        return run(*args, **kwargs)

    monkeypatch.setattr(loop, "run_trial", trial_of_100_s)
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    # What this machine charged, learnt from the trials run so far: a head-to-head of 3 is
    # 3 x (50 s start + 5 s warm-up) + 3 pairs x 3 rounds x 5 s = 210 s.
    monkeypatch.setattr(loop, "costs", lambda trials: Costs(
        trial_s=100.0, measure_s=50.0, round_s=5.0, start_s=50.0) if trials else None)

    loop.run_study(ctx, n_trials=6, finalists=3)

    # After trial 1 (100 s): 500 s left, 210 s reserved, 2 more fit; after trial 3: 90 s left.
    assert len(launched) == 3
    plans = [line for line in said if line.startswith("plan:")]
    assert plans == ["plan: a trial takes ~100 s here (start, stop and the rest ~50 s, "
                     "rounds ~5.0 s): 3 trials and a head-to-head of 3 (~210 s) fit in 10 min"]
    assert said[-1] == ("budget.timeout_min (10 min): no new trial started, the rest of the "
                        "time is the head-to-head's")
    ctx.store.close()


def test_a_fixed_engine_argument_the_engine_rejects_stops_the_study_after_one_trial(
        tmp_path: Path, monkeypatch):
    import pytest
    import yaml

    from tuner.spec.errors import BadInput

    spec_path = small_spec(tmp_path)
    spec = yaml.safe_load(spec_path.read_text())
    spec["engine"]["args"] = {**spec["engine"].get("args", {}), "max-modle-len": 512}
    write_yaml(spec_path, spec)
    ctx = _context(spec_path, [])
    launched: list[dict] = []
    reason = "vllm serve: error: unrecognized arguments: --max-modle-len 512"

    def rejected(ctx, study, trial, params, devices=None):
        launched.append(params)
        trial_id = ctx.store.start_trial(ctx.name, trial.number, params, worker_host="h",
                                         worker_pid=1, budget=ctx.run.budget)
        ctx.store.finish_trial(trial_id, state="failed", failure_kind="invalid_argument",
                               failure_reason=reason)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return TrialResult(trial.number, params, "failed", failure_kind="invalid_argument",
                           failure_reason=reason)

    monkeypatch.setattr(loop, "run_trial", rejected)
    with pytest.raises(BadInput, match=r"engine.args: the engine rejected 'max-modle-len'"):
        loop.run_study(ctx, n_trials=3)
    assert len(launched) == 1
    assert [t.state for t in ctx.store.trials(ctx.name)] == ["failed"]  # recorded, then stopped
    ctx.store.close()
