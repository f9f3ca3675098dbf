"""Confidence intervals for repeated measurements: the mean of a sample and the half-width of its
95% interval from Student's t distribution (the population spread is unknown, the samples few).

Pure computation; the t quantile comes from scipy rather than a hand-copied table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scipy.stats import t as student_t

CONFIDENCE = 0.95


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided critical value of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"need at least 1 degree of freedom, got {df}")
    return float(student_t.ppf(0.5 + confidence / 2, df))


def mean_ci(values: Sequence[float], confidence: float = CONFIDENCE
            ) -> tuple[float | None, float | None]:
    """(mean, half-width of its `confidence` interval): mean +- t * s / sqrt(n).

    (None, None) for no values; the half-width is None for a single value (no spread to estimate
    from). Assumes the values are independent draws, so callers pick a sample unit that is.
    """
    n = len(values)
    if n == 0:
        return None, None
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None
    return mean, t_quantile(n - 1, confidence) * statistics.stdev(values) / math.sqrt(n)


def converged(values: Sequence[float], target: float) -> bool:
    """Whether the interval's half-width is within `target` (a fraction) of the mean.

    False with fewer than two values or a mean of zero (nothing to be relative to).
    """
    mean, half = mean_ci(values)
    if half is None or not mean:
        return False
    return half <= target * abs(mean)


def spread_of_interval(half: float, mean: float, n: int, confidence: float = CONFIDENCE) -> float:
    """The sample's coefficient of variation (sd / mean) behind a half-width of n values: the
    inverse of `mean_ci`'s t * s / sqrt(n)."""
    return half / abs(mean) * math.sqrt(n) / t_quantile(n - 1, confidence)


def rounds_needed(spread: float, target: float, *, at_least: int = 2, at_most: int = 10_000
                  ) -> int | None:
    """How many values of this spread (sd / mean) bring the 95% half-width within `target` of
    the mean: the fewest n (from `at_least`) with t(n-1) * spread / sqrt(n) <= target; None
    beyond `at_most`."""
    for n in range(max(at_least, 2), at_most + 1):
        if t_quantile(n - 1) * spread / math.sqrt(n) <= target:
            return n
    return None


def paired_ratio(base: Sequence[float], other: Sequence[float], confidence: float = CONFIDENCE
                 ) -> tuple[float, float | None, float | None]:
    """The ratio other / base of two configurations measured in pairs of rounds taken side by
    side in time, and its `confidence` interval: the mean of the pairs' log-ratios with its
    Student's t interval, turned back into ratios (a drift that moves both rounds of a pair
    alike cancels in its ratio). (ratio, None, None) with a single pair."""
    if len(base) != len(other) or not base:
        raise ValueError(f"{len(base)} and {len(other)} rounds do not pair")
    logs = [math.log(o / b) for b, o in zip(base, other, strict=True)]
    mean, half = mean_ci(logs, confidence)
    if half is None:
        return math.exp(mean), None, None
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def server_spread(pairs: Sequence[tuple[float, float]]) -> float | None:
    """How far one server's figure strays from its configuration's (sd / mean), pooled over
    configurations each measured in two servers (a, b): sqrt(mean((a - b)^2 / (2 m^2))), m the
    pair's mean. A shared machine drifts between minutes, so this is the spread a figure
    carries when compared with one taken in another server. None without a pair."""
    terms = [(a - b) ** 2 / (2 * ((a + b) / 2) ** 2) for a, b in pairs if a + b > 0]
    return math.sqrt(math.fsum(terms) / len(terms)) if terms else None


def with_server_spread(value: float, half: float | None, spread: float, pairs: int,
                       confidence: float = CONFIDENCE) -> float:
    """The half-width of a one-server figure's interval once the server-to-server `spread`
    (estimated from `pairs` pairs: Student's t with that many degrees of freedom) is added to
    its own rounds' `half` in quadrature."""
    return math.hypot(half or 0.0, t_quantile(pairs, confidence) * spread * value)
