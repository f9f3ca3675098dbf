"""A trial's load search (`workload.concurrency: auto` or `request_rates: auto`): the next load
to measure, decided from the levels measured so far, and what the search found.

Double from the start while each level meets the SLA; once one misses, bisect between the
highest load that met it and the lowest above that missed, until the two are within the
resolution or the bound (the most requests the configuration runs at once) is reached. The
levels are measured by the trial's one sweep path (`tuner.search.trial.measure`): a grid sweep
is a fixed list of levels, a search is a list decided as it goes. Plain functions over
(load, met SLA) pairs; nothing here measures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

# A search measures at most this many levels: doubling from 1 to 4,096 and bisecting to 25%
# takes 16 (bounds a search with no bound of its own, e.g. request rates).
MAX_LEVELS = 16

Kind = Literal["concurrency", "rate"]
Point = tuple[float, bool]  # (load, met the SLA), in the order measured


@dataclass(frozen=True)
class Bounds:
    """Where a search starts, its highest load (None: none) and how close the bracket must
    close, as a fraction of the load that met the SLA; concurrency is whole requests."""

    kind: Kind
    start: float
    bound: float | None = None
    resolution: float = 0.25
    bound_why: str = ""  # where the bound comes from, for the outcome's text

    def __post_init__(self) -> None:
        if self.start <= 0 or (self.bound is not None and self.bound <= 0):
            raise ValueError(f"a load search needs positive loads: start {self.start}, "
                             f"bound {self.bound}")

    @property
    def first(self) -> float:
        start = max(1, math.floor(self.start)) if self.kind == "concurrency" else self.start
        return start if self.bound is None else min(start, self.bound)

    def text(self, load: float) -> str:
        return f"c={load:g}" if self.kind == "concurrency" else f"{load:g} req/s"


def bracket(history: list[Point]) -> tuple[float | None, float | None]:
    """The highest load that met the SLA (None: none did), and the lowest load above it that
    missed (None: none has). A miss under a load that met it is noise on a curve that only
    worsens with load, and does not close the bracket."""
    met = [load for load, ok in history if ok]
    low = max(met, default=None)
    high = min((load for load, ok in history if not ok and (low is None or load > low)),
               default=None)
    return low, high


def next_load(history: list[Point], bounds: Bounds) -> float | None:
    """The load to measure next, or None when the search is over (`outcome` says why)."""
    if not history:
        return bounds.first
    if len(history) >= MAX_LEVELS:
        return None
    low, high = bracket(history)
    if low is None:  # the first load already missed: nothing lower is searched
        return None
    if high is None:
        if bounds.bound is not None and low >= bounds.bound:
            return None
        up = low * 2
        return up if bounds.bound is None else min(up, bounds.bound)
    if _closed(low, high, bounds):
        return None
    middle = (low + high) / 2
    if bounds.kind == "concurrency":
        middle = math.floor(middle)
    return None if any(load == middle for load, _ in history) else middle


def _closed(low: float, high: float, bounds: Bounds) -> bool:
    step = bounds.resolution * low
    if bounds.kind == "concurrency":
        step = max(1.0, step)
    return high - low <= step


def outcome(history: list[Point], bounds: Bounds) -> tuple[float | None, str]:
    """The highest load that met the SLA (None: none did) and why the search ended there, in
    words (stored with the trial). Asked of a search that is over (`next_load` None); a search
    cut short (the server died, the trial's time ran out) says how far it got."""
    low, high = bracket(history)
    if not history:
        return None, "no level was measured"
    done = next_load(history, bounds) is None
    if low is None:
        return None, (f"{bounds.text(history[0][0])}, the first load, missed the SLA: lower "
                      "workload.load_search.start" if done else "no level met the SLA yet")
    if not done:
        return low, f"{bounds.text(low)} met the SLA; the search was cut short"
    if high is not None and _closed(low, high, bounds):
        return low, (f"{bounds.text(low)} met the SLA and {bounds.text(high)} missed it, within "
                     f"{bounds.resolution:.0%}")
    if high is None and bounds.bound is not None and low >= bounds.bound:
        why = f" ({bounds.bound_why})" if bounds.bound_why else ""
        return low, f"{bounds.text(low)} met the SLA at the search's bound{why}"
    if len(history) >= MAX_LEVELS:
        return low, f"{bounds.text(low)} met the SLA; the search stopped at {MAX_LEVELS} levels"
    return low, (f"{bounds.text(low)} met the SLA and {bounds.text(high)} missed it: no whole "
                 "concurrency lies between")


def most_levels(bounds: Bounds) -> int:
    """The most levels this search can measure: doubling to the bound, then bisecting the last
    doubling down to the resolution (MAX_LEVELS when unbounded); sizes the sweep's prompts."""
    if bounds.bound is None:
        return MAX_LEVELS
    doublings = max(0, math.ceil(math.log2(max(bounds.bound / bounds.first, 1)))) + 1
    halvings = max(1, math.ceil(math.log2(1 / bounds.resolution)) + 1)
    return min(MAX_LEVELS, doublings + halvings)
