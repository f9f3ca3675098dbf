"""The startup trials spread over every parameter's values, whatever the figures so far."""

from __future__ import annotations

import random

from tuner.search.startup import spread_choice

SPACE = [{"tp": tp, "batch": b, "spec": s} for tp in (1, 2) for b in (4, 16, 64)
         for s in ("none", "ngram")]


def test_each_startup_trial_measures_values_no_trial_has_had():
    measured: list[dict] = []
    for _ in range(3):
        untried = [c for c in SPACE if c not in measured]
        measured.append(spread_choice(untried, measured, random.Random(0)))
    assert {c["batch"] for c in measured} == {4, 16, 64}
    assert {c["tp"] for c in measured[:2]} == {1, 2}
    assert {c["spec"] for c in measured[:2]} == {"none", "ngram"}


def test_a_failed_trial_covers_nothing_so_its_values_are_tried_again():
    measured = [{"tp": 1, "batch": 4, "spec": "none"}]
    # batch 64 was in a failed trial only: it is still a value to measure.
    chosen = spread_choice([c for c in SPACE if c not in measured], measured, random.Random(0))
    assert chosen["batch"] != 4 and chosen["tp"] == 2 and chosen["spec"] == "ngram"


def test_the_startup_is_the_same_from_run_to_run():
    def startup(seed: int) -> list[dict]:
        rng, measured = random.Random(seed), []
        for _ in range(3):
            measured.append(spread_choice([c for c in SPACE if c not in measured], measured, rng))
        return measured

    assert startup(7) == startup(7)
