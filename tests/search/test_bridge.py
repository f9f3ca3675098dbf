"""What Optuna is told, and how it ranks it: crashes and infeasible samples rank behind every
trial that ran, a near miss of the SLA ahead of a far one."""

from __future__ import annotations

from dataclasses import replace

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.samplers._tpe.sampler import _split_trials

from tests.report.test_export import LEVEL
from tuner.measure.metrics import MISSING_VIOLATION, UNUSABLE_VIOLATION, sla_violations
from tuner.search.bridge import (
    INCUMBENT_FLOOR,
    IncumbentPruner,
    tell_measured,
    tell_pruned,
    tell_unusable,
)
from tuner.spec.sla import SLA

SLA_ = SLA(ttft_p90_ms=1000.0, min_tok_s_per_user_p90=20.0)
CONFIG = {"max_batch_size": CategoricalDistribution([4, 16, 64, 256])}


def ask(study: optuna.Study, batch: int) -> optuna.Trial:
    study.enqueue_trial({"max_batch_size": batch})
    trial = study.ask(CONFIG)
    return trial


def good_group(study: optuna.Study, n_below: int) -> list[int]:
    """The trials TPE models as good (its 'below' group), by their batch size."""
    trials = study.get_trials(deepcopy=False)
    below, _ = _split_trials(study, trials, n_below)
    return sorted(t.params["max_batch_size"] for t in below)


def near_miss(ttft_ms: float):
    level = replace(LEVEL, ttft_p90_ms=ttft_ms, meets_sla=False)
    return level.output_tok_s_per_gpu, sla_violations(level, SLA_)


def test_a_near_miss_is_in_the_good_group_ahead_of_a_crash_and_an_infeasible_sample():
    study = optuna.create_study(direction="maximize")
    tell_unusable(study, ask(study, 4), "failed", "crash", "Segfault")
    tell_unusable(study, ask(study, 16), "infeasible", "infeasible", "needs 4 devices")
    tell_measured(study, ask(study, 64), *near_miss(1020.0))  # 20 ms over a 1000 ms target

    assert good_group(study, 1) == [64]


def test_misses_rank_by_how_far_they_are_from_the_target_and_all_ahead_of_failures():
    study = optuna.create_study(direction="maximize")
    tell_unusable(study, ask(study, 4), "failed", "crash", "Segfault")
    tell_measured(study, ask(study, 16), *near_miss(9000.0))  # 9x the target
    tell_measured(study, ask(study, 64), *near_miss(1100.0))
    tell_measured(study, ask(study, 256), *near_miss(1500.0))

    assert good_group(study, 1) == [64]
    assert good_group(study, 2) == [64, 256]
    assert good_group(study, 3) == [16, 64, 256]


def test_a_failure_is_worse_than_the_worst_sla_miss_and_a_missing_figure_worse_than_any_miss():
    everything_failed = replace(LEVEL, errors=LEVEL.requests, ttft_p90_ms=None,
                                tok_s_per_user_p90=None, meets_sla=False)
    worst_miss = sum(v for v in sla_violations(everything_failed, SLA_).values() if v > 0)
    assert worst_miss < UNUSABLE_VIOLATION
    far = replace(LEVEL, errors=LEVEL.requests - 1, ttft_p90_ms=1e9, tok_s_per_user_p90=0.0)
    assert sum(sla_violations(far, SLA_).values()) < MISSING_VIOLATION


def test_a_pruned_trial_ranks_behind_every_complete_one_and_ahead_of_failures():
    study = optuna.create_study(direction="maximize")
    tell_measured(study, ask(study, 4), 100.0, sla_violations(LEVEL, SLA_))
    slow = ask(study, 16)
    slow.report(900.0, 0)  # pruned on a figure above the complete trial's: still behind it
    tell_pruned(study, slow, sla_violations(LEVEL, SLA_), "clearly below the incumbent")
    tell_unusable(study, ask(study, 64), "failed", "crash", "segfault")
    assert good_group(study, 1) == [4]
    assert good_group(study, 2) == [4, 16]


def test_the_pruner_prunes_once_the_reported_upper_end_is_under_the_incumbent():
    study = optuna.create_study(direction="maximize", pruner=IncumbentPruner())
    trial = ask(study, 4)
    assert not trial.should_prune()  # nothing reported yet
    trial.report(450.0, 0)
    assert not trial.should_prune()  # no incumbent yet
    trial.set_user_attr(INCUMBENT_FLOOR, 450.0)
    assert not trial.should_prune()  # touching the floor is not clearly below
    trial.set_user_attr(INCUMBENT_FLOOR, 451.0)
    assert trial.should_prune()
