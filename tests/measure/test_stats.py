"""Confidence intervals (tuner.measure.stats): Student-t half-widths against published table
values and against scipy's own interval, and the convergence rule the repeats stop on."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from scipy import stats as scipy_stats

from tuner.measure.stats import (
    converged,
    mean_ci,
    rounds_needed,
    spread_of_interval,
    t_quantile,
)


@pytest.mark.parametrize("df, table", [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262),
                                       (29, 2.045), (1000, 1.962)])
def test_the_t_quantile_matches_the_printed_table(df, table):
    assert t_quantile(df) == pytest.approx(table, abs=5e-4)


def test_mean_and_half_width_of_a_known_sample():
    # mean 5, sample stdev sqrt(10/4) = 1.5811; t(4) = 2.7764; half = 2.7764 * 1.5811 / sqrt(5)
    mean, half = mean_ci([3, 4, 5, 6, 7])
    assert mean == 5
    assert half == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)


def test_the_interval_is_scipys_t_interval():
    values = [random.Random(3).gauss(100, 7) for _ in range(12)]
    mean, half = mean_ci(values)
    lo, hi = scipy_stats.t.interval(0.95, len(values) - 1, loc=mean,
                                    scale=scipy_stats.sem(values))
    assert (mean - half, mean + half) == pytest.approx((lo, hi), rel=1e-12)


def test_one_value_has_a_mean_but_no_interval_and_none_has_neither():
    assert mean_ci([4.0]) == (4.0, None)
    assert mean_ci([]) == (None, None)


def test_about_95_percent_of_intervals_cover_the_true_mean():
    rng = random.Random(0)
    trials = 2000
    covered = 0
    for _ in range(trials):
        mean, half = mean_ci([rng.gauss(10, 2) for _ in range(5)])
        covered += abs(mean - 10) <= half
    # Binomial(2000, 0.95) has a standard deviation of 0.5 percentage points.
    assert 0.93 <= covered / trials <= 0.97


def test_converged_when_the_half_width_is_within_the_target_fraction_of_the_mean():
    tight = [100, 101, 99, 100]  # half-width about 1.3: 1.3% of the mean
    assert converged(tight, 0.05)
    assert not converged(tight, 0.01)
    assert not converged([100], 0.5)  # one round cannot show its spread
    assert not converged([0, 0], 0.05)


def test_the_spread_behind_an_interval_is_the_samples_sd_over_mean():
    values = [100.0, 110.0, 90.0, 105.0, 95.0]
    mean, half = mean_ci(values)
    assert spread_of_interval(half, mean, len(values)) == pytest.approx(
        statistics.stdev(values) / mean)


def test_rounds_needed_is_the_fewest_that_bring_the_interval_within_the_target():
    # 10% spread: t(n-1) * 0.10 / sqrt(n) <= 0.05 first holds at n = 18 (t(17) = 2.110).
    assert rounds_needed(0.10, 0.05) == 18
    assert t_quantile(16) * 0.10 / math.sqrt(17) > 0.05
    assert rounds_needed(0.001, 0.05) == 2
    assert rounds_needed(0.001, 0.05, at_least=7) == 7
    assert rounds_needed(5.0, 0.01, at_most=50) is None
