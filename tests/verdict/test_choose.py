"""Choosing across studies: which levels count (confirmations, once a study has them), the
targets, and the ranking by cost or throughput (SYNTHETIC ROWS, tests.choose_studies)."""

from __future__ import annotations

import pytest

from tests.choose_studies import TARGET, h200_and_b200, synthetic_level
from tuner.spec.errors import NoResult
from tuner.verdict.choose import Targets, choose, gap


def ranked(writers, targets: Targets, by: str = "cost"):
    datas = [w.data() for w in writers]
    return choose([(d.study, d.trials) for d in datas], targets, by)


def keys(choices) -> list[tuple[str, int, int]]:
    return [(c.study.name, c.trial.number, c.level.concurrency) for c in choices]


def test_each_configuration_is_offered_at_its_fastest_level_meeting_the_target(tmp_path):
    writers = h200_and_b200(f"sqlite:///{tmp_path / 'tuner.db'}")
    assert keys(ranked(writers, Targets(TARGET))) == [("h200", 0, 8), ("b200", 0, 8),
                                                      ("h200", 1, 8)]
    assert keys(ranked(writers, Targets(TARGET), "throughput")) == [
        ("b200", 0, 8), ("h200", 0, 8), ("h200", 1, 8)]
    # Without a per-user floor the B200's c=32 (9,000 tok/s/GPU) is both cheapest and fastest.
    assert keys(ranked(writers, Targets(0.0)))[0] == ("b200", 0, 32)


def test_the_gap_is_the_fraction_costlier_or_slower_than_the_winner(tmp_path):
    writers = h200_and_b200(f"sqlite:///{tmp_path / 'tuner.db'}")
    by_cost = ranked(writers, Targets(TARGET))
    assert gap(by_cost[0], by_cost[0], "cost") == 0
    assert gap(by_cost[1], by_cost[0], "cost") == pytest.approx(
        by_cost[1].usd_per_mtok / by_cost[0].usd_per_mtok - 1)
    by_tok = ranked(writers, Targets(TARGET), "throughput")
    assert gap(by_tok[1], by_tok[0], "throughput") == pytest.approx(1 - 2400 / 4000)


def test_a_ttft_target_leaves_out_slower_first_tokens(tmp_path):
    writers = h200_and_b200(f"sqlite:///{tmp_path / 'tuner.db'}")
    assert ranked(writers, Targets(100.0, ttft_p90_ms=50.0))  # every level has 30 ms ...
    assert ("b200", 1, 8) in keys(ranked(writers, Targets(100.0)))  # ... but b200 trial 1's 60
    assert ("b200", 1, 8) not in keys(ranked(writers, Targets(100.0, ttft_p90_ms=50.0)))


def test_once_a_study_has_confirmations_only_confirmed_levels_count(tmp_path):
    h200, b200 = h200_and_b200(f"sqlite:///{tmp_path / 'tuner.db'}")
    # h200's TP2 is re-run and measures slower in its fresh server; its TP1 (the cheapest
    # first run) is never re-run, so it no longer counts.
    h200.store.record_confirmation("h200", 1, state="differs", objective=1200.0, meets_sla=True,
                                   reason="synthetic",
                                   measurements=[synthetic_level(8, 1200.0, 190.0, 2)])
    choices = ranked([h200, b200], Targets(TARGET))
    assert keys(choices) == [("b200", 0, 8), ("h200", 1, 8)]
    assert choices[1].confirmed and choices[1].tok_s_per_gpu == 1200.0
    assert not choices[0].confirmed  # b200 has no confirmation: its first runs count


def test_no_level_reaching_the_target_is_no_result_naming_the_fastest(tmp_path):
    writers = h200_and_b200(f"sqlite:///{tmp_path / 'tuner.db'}")
    with pytest.raises(NoResult, match="the fastest per-user p90 that met its SLA is 320.0"):
        ranked(writers, Targets(500.0))
