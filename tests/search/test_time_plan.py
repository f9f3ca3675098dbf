"""The study's plan to fit its time: what a trial and a round cost here, and what still fits
before the head-to-head."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from tests.report.test_export import LEVEL
from tuner.search.time_plan import Costs, costs, head_to_head_s, plan
from tuner.store import TrialRecord

T0 = dt.datetime(2026, 12, 7, 10, 0, tzinfo=dt.timezone.utc)


def trial(number: int, seconds: float, levels: list) -> TrialRecord:
    return TrialRecord(
        id=number, study_name="s", number=number, state="complete", params={"n": number},
        launch_plan=None, objective=1.0, meets_sla=True, failure_kind=None,
        failure_reason=None, log_tail=None, log_path=None, engine_version=None, gpus=1,
        hardware=None, worker_host=None, worker_pid=None, started_at=T0,
        finished_at=T0 + dt.timedelta(seconds=seconds), measurements=levels)


def test_costs_are_the_medians_of_the_trials_that_measured():
    trials = [trial(i, s, [replace(LEVEL, duration_s=d, rounds=r)])
              for i, (s, d, r) in enumerate([(60, 20, 5), (80, 30, 10), (100, 40, 10)])]
    c = costs(trials)
    assert (c.trial_s, c.measure_s, c.round_s) == (80, 30, 4)
    assert c.start_s == 50
    # A failure costs its start, and its level (cut at its first error) says nothing of rounds.
    crashed = replace(trial(7, 30, [replace(LEVEL, duration_s=0.1, rounds=1)]), state="failed")
    c = costs(trials + [crashed])
    assert (c.trial_s, c.measure_s, c.round_s) == (70, 30, 4)
    assert c.start_s == 50  # a head-to-head's finalist starts as a trial that ran does
    assert costs([crashed]) is None  # no plan until a trial runs to a figure
    assert costs([replace(trial(9, 5, []), state="failed")]) is None


def test_the_head_to_head_is_reserved_and_the_rest_is_trials():
    c = Costs(trial_s=80, measure_s=30, round_s=3, start_s=50)
    # 3 finalists: 3 starts and warm-up rounds (3 x 53 s), 3 pairs of 3 rounds (27 s).
    assert head_to_head_s(c, 3) == 3 * 53 + 3 * 3 * 3
    assert head_to_head_s(c, 1) == 0
    p = plan(c, left_s=600, finalists=3, limit_min=10, wanted=6)
    assert p.more == (600 - 186) // 80 == 5
    assert p.line(2) == ("plan: a trial takes ~80 s here (start, stop and the rest ~50 s, "
                         "rounds ~3.0 s): 7 trials and a head-to-head of 3 (~186 s) fit in "
                         "10 min")
    assert plan(c, left_s=6000, finalists=3, limit_min=100, wanted=6).more == 6
    assert plan(c, left_s=100, finalists=3, limit_min=10, wanted=6).more == 0
