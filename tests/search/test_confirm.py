"""Confirmation: which trials are re-run, how a re-run is judged, and how it names the winner."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from tests.report.test_export import LEVEL, add_trial, study_store
from tuner.report.export import write_export
from tuner.search.confirm import FALLBACK_TOLERANCE, candidates, judge
from tuner.spec.sla import SLA
from tuner.verdict.rules import winner

SLA_ = SLA(ttft_p90_ms=100.0, min_tok_s_per_user_p90=50.0)  # the test study's (test_export)

TP1 = {"tensor_parallel_size": 1, "max_batch_size": 4}
TP2 = {"tensor_parallel_size": 2, "max_batch_size": 16}


@pytest.fixture
def store(tmp_path):
    return study_store(tmp_path)


def _levels(value: float, *, meets: bool = True, ci: float | None = None, gpus: int = 1,
            converged: bool | None = None):
    """One level; with an interval, converged unless said otherwise."""
    if converged is None and ci is not None:
        converged = True
    return [replace(LEVEL, output_tok_s_per_gpu=value, output_tok_s=value * gpus,
                    meets_sla=meets, output_tok_s_ci95=ci, converged=converged,
                    rounds=None if ci is None else 5)]


def test_the_top_k_that_met_the_sla_are_chosen_by_their_first_run(store):
    for number, (value, meets) in enumerate([(300, True), (900, False), (500, True),
                                             (400, True), (100, True)]):
        add_trial(store, number, {"max_batch_size": number}, float(value), meets)
    chosen = candidates(store.trials("s"), 3)
    assert [t.number for t in chosen] == [2, 3, 0]


def test_a_trial_confirmed_before_is_not_rerun_unless_asked_again(store):
    add_trial(store, 0, TP1, 300.0, True)
    add_trial(store, 1, TP2, 500.0, True)
    store.record_confirmation("s", 1, state="confirmed", objective=490.0, meets_sla=True,
                              reason=None)
    assert [t.number for t in candidates(store.trials("s"), 3)] == [0]
    assert [t.number for t in candidates(store.trials("s"), 3, again=True)] == [1, 0]


def test_a_rerun_within_the_combined_interval_is_confirmed(store):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    trial = store.trials("s")[0]
    trial.measurements = _levels(500.0, ci=30.0)
    # Half-widths of 30 and 40 combine to 50: 460 is 40 away, inside.
    verdict = judge(trial, _levels(460.0, ci=40.0), SLA_)
    assert (verdict.state, verdict.again, verdict.meets_sla) == ("confirmed", 460.0, True)


def test_a_rerun_outside_the_interval_says_it_differs_and_by_how_much(store):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    trial = store.trials("s")[0]
    trial.measurements = _levels(500.0, ci=30.0)
    verdict = judge(trial, _levels(420.0, ci=40.0), SLA_)
    assert verdict.state == "differs"
    assert "-80 tok/s/GPU (-16%) from the first run (500)" in verdict.reason
    assert "±50 tok/s/GPU (95% intervals of both runs)" in verdict.reason


def test_the_interval_is_per_gpu_like_the_objective(store):
    add_trial(store, 0, TP2, 500.0, True, gpus=2)
    trial = store.trials("s")[0]
    trial.measurements = _levels(500.0, ci=60.0, gpus=2)  # ±30 per GPU
    assert judge(trial, _levels(465.0, ci=80.0, gpus=2), SLA_).state == "confirmed"  # within ±50
    assert judge(trial, _levels(440.0, ci=80.0, gpus=2), SLA_).state == "differs"


def test_without_a_measured_interval_agreement_is_inconclusive_and_a_gap_differs(store):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    trial = store.trials("s")[0]
    inside = 500.0 * (1 - FALLBACK_TOLERANCE) + 1
    verdict = judge(trial, _levels(inside), SLA_)
    assert verdict.state == "inconclusive" and "did not converge" in verdict.reason
    verdict = judge(trial, _levels(500.0 * (1 - FALLBACK_TOLERANCE) - 1), SLA_)
    assert verdict.state == "differs" and "no interval was measured" in verdict.reason


def test_overlapping_intervals_of_runs_that_did_not_converge_are_inconclusive(store):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    trial = store.trials("s")[0]
    trial.measurements = _levels(500.0, ci=240.0, converged=False)  # ±48%
    verdict = judge(trial, _levels(350.0, ci=60.0), SLA_)  # 30% away, inside the wide interval
    assert verdict.state == "inconclusive"
    assert "the first run did not converge" in verdict.reason
    assert verdict.again == 350.0


def test_the_winner_is_ranked_by_the_reruns_and_carries_its_verdict(store):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    add_trial(store, 1, TP2, 450.0, True, gpus=1)
    add_trial(store, 2, {"tensor_parallel_size": 1, "max_batch_size": 64}, 480.0, True, gpus=1)
    store.record_confirmation("s", 0, state="inconclusive", objective=470.0, meets_sla=True,
                              reason="wide")
    store.record_confirmation("s", 1, state="differs", objective=300.0, meets_sla=True,
                              reason="-150")
    store.record_confirmation("s", 2, state="inconclusive", objective=900.0, meets_sla=False,
                              reason="missed")
    best = winner(store.get_study("s"), store.trials("s"))
    # Not the one that missed the SLA in its re-run, nor the one re-measured lower.
    assert (best.number, best.confirm_state) == (0, "inconclusive")


def test_a_rerun_that_misses_the_sla_differs_and_one_with_no_success_failed(store):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    trial = store.trials("s")[0]
    missed = judge(trial, _levels(520.0, meets=False), SLA_)
    assert (missed.state, missed.meets_sla) == ("differs", False)
    assert "missed the SLA in its confirmation" in missed.reason
    nothing = [replace(LEVEL, errors=LEVEL.requests, meets_sla=False)]
    assert judge(trial, nothing, SLA_).state == "failed"


def test_the_winner_is_the_best_confirmed_trial_by_its_confirmation(store):
    add_trial(store, 0, TP1, 600.0, True, gpus=1)  # lucky first run
    add_trial(store, 1, TP2, 550.0, True)
    add_trial(store, 2, {"max_batch_size": 64}, 700.0, True)  # confirmation failed
    store.record_confirmation("s", 0, state="differs", objective=420.0, meets_sla=True,
                              reason="lower", measurements=_levels(420.0))
    store.record_confirmation("s", 1, state="confirmed", objective=540.0, meets_sla=True,
                              reason=None, measurements=_levels(540.0, gpus=2))
    store.record_confirmation("s", 2, state="failed", objective=None, meets_sla=None,
                              reason="crash: segfault")
    assert winner(store.get_study("s"), store.trials("s")).number == 1


def test_a_confirmation_that_missed_the_sla_cannot_win(store):
    add_trial(store, 0, TP1, 600.0, True, gpus=1)
    add_trial(store, 1, TP2, 300.0, True)
    store.record_confirmation("s", 0, state="differs", objective=650.0, meets_sla=False,
                              reason="missed", measurements=_levels(650.0, meets=False))
    store.record_confirmation("s", 1, state="confirmed", objective=310.0, meets_sla=True,
                              reason=None, measurements=_levels(310.0, gpus=2))
    assert winner(store.get_study("s"), store.trials("s")).number == 1


def test_the_export_of_a_confirmed_winner_carries_both_runs(store, tmp_path):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    store.record_confirmation("s", 0, state="differs", objective=430.0, meets_sla=True,
                              reason="-70 from the first run", measurements=_levels(430.0))
    write_export(store.get_study("s"), winner(store.get_study("s"), store.trials("s")),
                 tmp_path, ("json",))
    record = json.loads((tmp_path / "best.json").read_text())
    assert [m["output_tok_s_per_gpu"] for m in record["measurements"]] == [500.0]
    confirmation = record["confirmation"]
    assert (confirmation["state"], confirmation["value"]) == ("differs", 430.0)
    assert confirmation["reason"] == "-70 from the first run"
    assert [m["output_tok_s_per_gpu"] for m in confirmation["measurements"]] == [430.0]
    assert confirmation["measured_at"]


def test_an_unconfirmed_export_says_so(store, tmp_path):
    add_trial(store, 0, TP1, 500.0, True, gpus=1)
    write_export(store.get_study("s"), store.trials("s")[0], tmp_path, ("json",))
    assert json.loads((tmp_path / "best.json").read_text())["confirmation"] is None


def test_the_dashboard_shows_each_trials_confirmation_and_the_winners(store):
    from tuner.report import dashboard_data as dd

    add_trial(store, 0, TP1, 600.0, True, gpus=1)
    add_trial(store, 1, TP2, 550.0, True)
    store.record_confirmation("s", 1, state="confirmed", objective=540.0, meets_sla=True,
                              reason=None, measurements=_levels(540.0, gpus=2))
    data = dd.read_study(store, "s")
    frame = dd.trials_frame(data).set_index("trial")
    assert frame.loc[1, "confirmation"] == "confirmed"
    assert frame.loc[1, dd.CONFIRMED_TOK_GPU] == 540.0
    assert pd.isna(frame.loc[0, "confirmation"])
    card = dd.best_card(data)
    assert card.trial.number == 1
    assert card.figures["confirmation"] == (
        "confirmation in a fresh server: confirmed at 540 tok/s/GPU")
    again = dd.levels_frame(card.trial, confirmation=True)
    assert list(again[dd.TOK_GPU]) == [540.0]
