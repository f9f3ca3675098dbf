"""Which parameters mattered: Optuna's importance evaluator over the configurations the study
measured, or why there is no answer.

Rated are tuner's own complete trials, one per distinct configuration, at their figure
(`rules.figure`). Optuna's own study would count more: a repeat of a finished configuration is
a trial there, and a crash is told to it as a COMPLETE trial worth 0 (so that TPE steers away),
which would rate whatever crashed as the most important parameter. A parameter some rated
trials do not have (a draft length exists only with speculation) is left out and named.

The rating itself is Optuna's, through the one bridge to it (`tuner.search.bridge.importances`,
a study in memory only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.report.dashboard_data.source import StudyData
from tuner.search.bridge import importances
from tuner.verdict import rules

__all__ = ["Importance", "param_importances"]


@dataclass
class Importance:
    values: dict[str, float]  # parameter -> share of the objective's variance, largest first
    complete: int  # distinct complete configurations the estimate rests on
    note: str | None  # why there are no values, or how far to trust them
    left_out: list[str] = field(default_factory=list)  # parameters some rated trials lack


_MIN_TRUSTED = 10


def param_importances(data: StudyData) -> Importance:
    """The importances over the study's complete, distinct configurations; explained instead
    when there are fewer than two or nothing varied."""
    rated: dict[str, tuple[dict, float]] = {}
    for t in data.trials:
        value = rules.figure(t, data.study).value
        if t.state == "complete" and value is not None:
            rated.setdefault(rules.config_key(t.params), (t.params, value))
    n = len(rated)
    if n < 2:
        return Importance({}, n, "Importance needs at least 2 complete configurations; this "
                                 f"study has {n}.")
    configs = [c for c, _ in rated.values()]
    common = set.intersection(*(set(c) for c in configs))
    left_out = sorted(set().union(*configs) - common)
    varied = [k for k in sorted(common) if len({repr(c[k]) for c in configs}) > 1]
    lacking = (f" Left out: {', '.join(left_out)}, which some of them do not have."
               if left_out else "")
    if not varied:
        return Importance({}, n, f"The {n} complete configurations share every parameter value "
                                 f"they all have: nothing varied, so nothing can be rated."
                                 + lacking, left_out)
    values = importances([{k: c[k] for k in common} for c in configs],
                         [v for _, v in rated.values()])
    note = (f"Only {n} complete configurations: with so few, importances are a rough hint, "
            "not a measurement." if n < _MIN_TRUSTED else None)
    if lacking:
        note = ((note or "") + lacking).strip()
    return Importance(values, n, note, left_out)

