"""The study's plan to fit `budget.timeout_min`: what a trial and a measurement round cost on
this machine, learnt from the trials of this run, and how many more trials fit before the
head-to-head that follows them.

A gpt-oss-120b server takes minutes to start and a 2-core machine with a busy core takes twice
as long as a quiet one, so a fixed trial count either overruns its time or ends with nothing
confirmed. The plan is made again after every trial; the loop starts no trial the plan says
would not end, with the head-to-head after it, within the limit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tuner.store import TrialRecord
from tuner.verdict.finalists import MIN_PAIRS

# The head-to-head is planned at its fewest pairs: it stops once decided, often there, and
# past them it runs only while the time limit allows.
PLANNED_PAIRS = MIN_PAIRS


@dataclass(frozen=True)
class Costs:
    """What this machine charged, from the trials this run launched."""

    trial_s: float  # a trial, start to stop: server start, its sweep, the quality gate
    measure_s: float  # of a trial that ran to a figure, the time measuring its levels
    round_s: float  # one measurement round
    # Of a trial that ran to a figure, the rest: its server's start and stop, the quality gate
    # (what each finalist of the head-to-head pays again).
    start_s: float = 0.0


def costs(trials: list[TrialRecord]) -> Costs | None:
    """Median costs of `trials`: a trial's time over every one that finished (a failure costs its
    server start too), measuring and rounds over those that ran to a figure; None before one
    did (a failed level stops at its first error, or drags on through timeouts: its duration
    says nothing of a round's)."""
    finished = [t for t in trials if t.finished_at is not None]
    ran = [t for t in finished if t.state in ("complete", "pruned") and t.measurements]
    if not ran:
        return None
    rounds = [m.duration_s / (m.rounds or 1) for t in ran for m in t.measurements]
    return Costs(
        trial_s=statistics.median((t.finished_at - t.started_at).total_seconds()
                                  for t in finished),
        measure_s=statistics.median(sum(m.duration_s for m in t.measurements) for t in ran),
        round_s=statistics.median(rounds),
        start_s=statistics.median(max((t.finished_at - t.started_at).total_seconds()
                                      - sum(m.duration_s for m in t.measurements), 0.0)
                                  for t in ran))


def head_to_head_s(c: Costs, finalists: int) -> float:
    """A head-to-head of `finalists` here: their servers start one after another, a warm-up
    round each, then PLANNED_PAIRS pairs of rounds; none with fewer than two finalists."""
    if finalists < 2:
        return 0.0
    return finalists * (c.start_s + c.round_s) + PLANNED_PAIRS * finalists * c.round_s


@dataclass(frozen=True)
class Plan:
    costs: Costs
    more: int  # trials that still fit
    head_to_head_s: float
    finalists: int
    limit_min: float

    def line(self, launched: int) -> str:
        c = self.costs
        h2h = (f" and a head-to-head of {self.finalists} (~{_duration(self.head_to_head_s)})"
               if self.finalists >= 2 else "")
        return (f"plan: a trial takes ~{c.trial_s:.0f} s here (start, stop and the rest "
                f"~{c.start_s:.0f} s, rounds ~{c.round_s:.1f} s): {launched + self.more} "
                f"trials{h2h} fit in {self.limit_min:g} min")


def plan(c: Costs, left_s: float, finalists: int, limit_min: float, wanted: int) -> Plan:
    """How many of `wanted` more trials fit in `left_s` with the head-to-head after them."""
    h2h = head_to_head_s(c, finalists)
    fit = math.floor(max(left_s - h2h, 0.0) / c.trial_s) if c.trial_s > 0 else wanted
    return Plan(c, min(fit, wanted), h2h, finalists, limit_min)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 300 else f"{seconds / 60:.0f} min"
