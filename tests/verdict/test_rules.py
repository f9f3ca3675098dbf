"""The search's domain rules, each written once (tuner.verdict.rules): a configuration's identity,
what spends the budget (the same in Python and in the store's SQL), the level a trial's objective
comes from, and which trial wins."""

from __future__ import annotations

import itertools
from dataclasses import replace
from types import SimpleNamespace

import pytest

from tests.report.test_export import LEVEL
from tuner.spec.sla import SLA
from tuner.store import Store
from tuner.verdict import rules
from tuner.verdict.rules import objective

BASE = LEVEL  # a level that met the SLA; each test sets what it is about


# the configuration key


def test_a_configuration_is_the_same_whatever_the_order_of_its_parameters():
    a = {"tensor_parallel_size": 2, "enable_expert_parallel": True, "max_num_seqs": 64}
    b = dict(reversed(list(a.items())))
    assert rules.config_key(a) == rules.config_key(b)


@pytest.mark.parametrize("other", [
    {"tensor_parallel_size": 2, "enable_expert_parallel": False},  # a value differs
    {"tensor_parallel_size": 2},  # a parameter is missing
    {"tensor_parallel_size": 2, "enable_expert_parallel": True, "draft": None},  # one more
    {"tensor_parallel_size": "2", "enable_expert_parallel": True},  # another type
])
def test_configurations_that_differ_in_anything_have_different_keys(other):
    assert rules.config_key({"tensor_parallel_size": 2, "enable_expert_parallel": True}) \
        != rules.config_key(other)


# the budget: one rule, in Python and in the store's claim


STATES = ["running", "complete", "failed", "infeasible"]
KINDS = [None, "crash", "oom", "timeout", "interrupted", "infeasible"]


def test_the_store_counts_the_budget_as_the_rule_does(tmp_path):
    combos = [(s, k) for s, k in itertools.product(STATES, KINDS)
              if (s in ("running", "complete")) == (k is None)]
    with Store.open(f"sqlite:///{tmp_path / 'b.db'}") as store:
        store.ensure_study("s", engine="vllm", model="m", gpu_type="cpu", spec={}, space={},
                           tuner_version="0")
        for n, (state, kind) in enumerate(combos):
            if state == "infeasible":
                store.record_infeasible("s", n, {"n": n}, "does not fit")
                continue
            trial_id = store.start_trial("s", n, {"n": n}, worker_host="h", worker_pid=1)
            if state != "running":
                store.finish_trial(trial_id, state=state, failure_kind=kind,
                                   failure_reason=kind)
        trials = store.trials("s")
        running = sum(t.state == "running" for t in trials)
        assert store.budget_used("s") == rules.launched(trials) + running
    counted = {(t.state, t.failure_kind) for t in trials
               if rules.counts_toward_budget(t.state, t.failure_kind)}
    assert ("failed", "interrupted") not in counted and ("complete", None) in counted
    assert {("failed", k) for k in ("crash", "oom", "timeout")} <= counted
    assert not any(state == "infeasible" for state, _ in counted)


# the level a trial's objective comes from


SLA_ = SLA(ttft_p90_ms=100.0, min_tok_s_per_user_p90=100.0)


def level(concurrency: int, tok_s_per_gpu: float, meets: bool, errors: int = 0, requests: int = 4,
          ttft: float = 30.0, user: float = 140.0):
    return replace(BASE, concurrency=concurrency, output_tok_s_per_gpu=tok_s_per_gpu,
                   meets_sla=meets, errors=errors, requests=requests, ttft_p90_ms=ttft,
                   tok_s_per_user_p90=user)


def test_objective_is_the_best_level_that_meets_the_sla_even_when_a_failing_one_is_faster():
    levels = [level(1, 50, True), level(4, 120, True), level(16, 300, False, ttft=400)]
    value, best, feasible = objective(levels, SLA_)
    assert (value, best.concurrency, feasible) == (120, 4, True)


def test_without_a_level_meeting_the_sla_the_one_closest_to_it_is_returned_as_infeasible():
    # c=16 is the fastest but misses TTFT by 4x; c=4 misses it by 10%: the near miss speaks.
    levels = [level(1, 50, False, ttft=150), level(4, 120, False, ttft=110),
              level(16, 300, False, ttft=400)]
    value, best, feasible = objective(levels, SLA_)
    assert (value, best.concurrency, feasible) == (120, 4, False)


def test_a_miss_of_either_target_is_weighed_relative_to_the_target():
    # 20 ms over a 100 ms TTFT target (20%) is further than 10 tok/s under a 100 tok/s floor.
    levels = [level(2, 80, False, ttft=120), level(8, 60, False, user=90)]
    assert objective(levels, SLA_)[1].concurrency == 8


def test_levels_where_every_request_failed_are_not_candidates():
    levels = [level(1, 0.0, False, errors=4), level(4, 10, False, errors=3)]
    value, best, feasible = objective(levels, SLA_)
    assert (value, best.concurrency, feasible) == (10, 4, False)
    assert objective([level(1, 0.0, False, errors=4)], SLA_) == (None, None, False)


def test_nothing_measured_gives_no_value():
    assert objective([], SLA_) == (None, None, False)


def test_ties_go_to_the_lower_concurrency_listed_first():
    value, best, feasible = objective([level(2, 100, True), level(8, 100, True)], SLA_)
    assert (value, best.concurrency, feasible) == (100, 2, True)


# the levels a sweep skips, and the incumbent a trial must be able to beat


def test_a_level_over_the_ttft_target_or_under_the_per_user_floor_misses_on_latency():
    assert rules.latency_miss(level(4, 100, True), SLA_) is None
    assert "TTFT p90 140 ms over the SLA's 100 ms" in rules.latency_miss(
        level(4, 100, False, ttft=140), SLA_)
    assert "per-user p90 90.0 tok/s under the SLA's 100.0" in rules.latency_miss(
        level(4, 100, False, user=90), SLA_)
    # Failed requests are not latency: the next level may still be fast enough.
    assert rules.latency_miss(level(4, 100, False, errors=1), SLA_) is None


def test_a_levels_interval_is_per_gpu_like_the_objective():
    m = replace(BASE, output_tok_s=800.0, output_tok_s_per_gpu=400.0, output_tok_s_ci95=80.0)
    assert rules.interval(m) == (360.0, 440.0)
    assert rules.interval(replace(m, output_tok_s_ci95=None)) == (400.0, 400.0)


def _trial(number: int, value: float, meets: bool = True, ci: float | None = None,
           confirmed: float | None = None):
    from tests.search.test_confirm import _levels
    from tuner.store import TrialRecord

    return TrialRecord(
        id=number, study_name="s", number=number, state="complete", params={"n": number},
        launch_plan=None, objective=value, meets_sla=meets, failure_kind=None,
        failure_reason=None, log_tail=None, log_path=None, engine_version=None, gpus=1,
        hardware=None, worker_host=None, worker_pid=None, started_at=None, finished_at=None,
        measurements=_levels(value, meets=meets, ci=ci),
        confirm_state=None if confirmed is None else "confirmed",
        confirm_objective=confirmed, confirm_meets_sla=None if confirmed is None else True)


def test_the_incumbent_is_the_lower_end_of_the_best_sla_meeting_trial_until_one_is_confirmed():
    sla = SLA(ttft_p90_ms=None, min_tok_s_per_user_p90=None)
    assert rules.incumbent_floor([], sla) is None
    assert rules.incumbent_floor([_trial(0, 900.0, meets=False)], sla) is None
    trials = [_trial(0, 900.0, meets=False), _trial(1, 500.0, ci=50.0), _trial(2, 480.0)]
    # 500 ± 50 is not clearly above 480, and another server may measure 15% less.
    assert rules.incumbent_floor(trials, sla) == pytest.approx(480.0 * 0.85)
    trials.append(_trial(3, 450.0, ci=20.0, confirmed=470.0))
    # A confirmed figure outranks first runs; the two servers of trial 3 measured 450 and 470,
    # a spread the floor now carries: 470 less t(1) x 3.07% x 470.
    spread = 20 / 2 ** 0.5 / 460
    assert rules.server_spread_of(trials) == pytest.approx((spread, 1))
    assert rules.incumbent_floor(trials, sla) == pytest.approx(470 - 12.706 * spread * 470,
                                                               rel=1e-4)


def test_the_server_to_server_spread_pools_the_configurations_measured_in_two_servers():
    trials = [_trial(0, 1000.0, confirmed=900.0), _trial(1, 500.0, confirmed=500.0),
              _trial(2, 800.0)]
    spread, pairs = rules.server_spread_of(trials)
    assert pairs == 2
    assert spread == pytest.approx(((100 ** 2 / (2 * 950 ** 2)) / 2) ** 0.5)
    line = rules.server_spread_line(trials, trials[0])
    assert line.startswith("server to server: a figure strays 5.3% (sd/mean) from its "
                           "configuration's between servers here (2 configuration(s) measured "
                           "in two servers), so trial 0's 900 tok/s/GPU is ±")
    assert rules.server_spread_line(trials[2:], trials[2]) is None


def test_the_advice_for_a_study_without_a_winner_follows_what_its_trials_did():
    def t(number: int, state: str, kind: str | None = None):
        return replace(_trial(number, 100.0, meets=False), state=state, failure_kind=kind)

    crashed = rules.no_result_advice("s", [t(0, "failed", "crash"), t(1, "failed", "crash"),
                                           t(2, "failed", "invalid_argument")])
    assert "every trial that launched failed (2 crash, 1 invalid_argument)" in crashed
    assert "relax" not in crashed
    missed = rules.no_result_advice("s", [t(0, "complete"), t(1, "failed", "crash")])
    assert "relax the spec's sla" in missed
    assert "widen the search space" in rules.no_result_advice("s", [t(0, "infeasible")])


def test_a_trials_one_figure_is_the_run_that_decided_its_verdict_and_its_other_run_is_named():
    from tuner.store import HeadToHead

    study = SimpleNamespace(head_to_head=HeadToHead(leader=2, pick=2, reason="", together=True,
                                                    ratios=[{"trial": 5}], rounds=[]))
    first_only = _trial(1, 900.0)
    shown = rules.figure(first_only, study)
    assert (shown.value, shown.source, shown.other_text()) == (900.0, "first run", None)
    # Met in the head-to-head: its rounds there are its figure, the first run is the other.
    h2h = replace(_trial(2, 3313.0, confirmed=2041.0), confirm_state="differs",
                  confirm_reason="-1,272 tok/s/GPU (-38%) from the first run")
    shown = rules.figure(h2h, study)
    assert (shown.value, shown.source, shown.levels) == (2041.0, "head-to-head", h2h.confirmation)
    assert shown.other_text() == ("first run 3,313: differs, -1,272 tok/s/GPU (-38%) from the "
                                  "first run")
    # Confirmed alone in a fresh server: its confirmation.
    assert rules.figure(_trial(3, 500.0, confirmed=480.0), study).source == "confirmation"
    # A confirmation that missed the SLA decides nothing: the first run stands, the re-run shown.
    missed = replace(_trial(5, 700.0, confirmed=650.0), confirm_meets_sla=False,
                     confirm_state="differs", confirm_reason="missed the SLA")
    shown = rules.figure(missed, study)
    assert (shown.value, shown.source) == (700.0, "first run")
    assert shown.other_text() == "head-to-head 650: differs, missed the SLA"
