"""One row per trial: the trials table, its filters and sort order, and the study's progress."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from tuner.report.dashboard_data.labels import (
    CONFIRMED_TOK_GPU,
    TOK_GPU,
    USD_MTOK,
    USER_P90,
    local_time,
    param_label,
    param_value,
)
from tuner.report.dashboard_data.source import StudyData
from tuner.report.tables import FROM, LOAD_AT_SLA, QUALITY, trial_row
from tuner.spec.space import describe
from tuner.store import TrialRecord
from tuner.verdict import rules
from tuner.verdict.cost import level_usd_per_mtok

__all__ = ["filter_trials", "option_order", "param_columns", "progress_frame", "sort_trials",
           "trials_frame"]


def param_columns(data: StudyData) -> list[str]:
    """The study's parameters in the search space's order, then any others a trial has."""
    names = list((data.study.space or {}).get("parameters", {}) or {})
    for t in data.trials:
        names += [k for k in t.params if k not in names]
    return names


def trials_frame(data: StudyData) -> pd.DataFrame:
    """One row per trial: state, each parameter in its own column, the figures at the level the
    objective comes from (its USD per million output tokens too), and the failure reason."""
    params = param_columns(data)
    rows = []
    sla = rules.study_sla(data.study)
    for t in data.trials:
        # The level its figure comes from (`rules.figure`); a failed trial's has none.
        level = (rules.best_level(rules.figure(t, data.study).levels, sla)[0]
                 if t.state == "complete" else None)
        duration = (t.finished_at - t.started_at).total_seconds() if t.finished_at else None
        rows.append({
            **{param_label(p): param_value(t.params.get(p)) for p in params},
            **trial_row(t, data.study),
            USD_MTOK: None if level is None else level_usd_per_mtok(data.study, t, level),
            "at c": None if level is None else level.concurrency,
            "TTFT p90 ms": None if level is None else level.ttft_p90_ms,
            USER_P90: None if level is None else level.tok_s_per_user_p90,
            "confirmation": t.confirm_state, CONFIRMED_TOK_GPU: t.confirm_objective,
            "started": local_time(t.started_at), "duration s": duration,
        })
    # What a viewer picks by comes first (its figure, where it is from, the verdict and why),
    # then the parameters; the configuration's one-line text, which repeats them, last.
    columns = ["trial", "state", TOK_GPU, FROM, "SLA", "reason", *map(param_label, params),
               USD_MTOK, "at c", "TTFT p90 ms", USER_P90, QUALITY, LOAD_AT_SLA, "GPUs",
               "confirmation", CONFIRMED_TOK_GPU, "failure", "config", "started", "duration s"]
    frame = pd.DataFrame(rows, columns=columns)
    for c in (TOK_GPU, USD_MTOK, LOAD_AT_SLA, "TTFT p90 ms", USER_P90, CONFIRMED_TOK_GPU,
              "duration s"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    for c in ("at c", "GPUs"):
        frame[c] = frame[c].astype("Int64")
    return frame


def filter_trials(frame: pd.DataFrame, *, states: Iterable[str] | None = None,
                  params: dict[str, Iterable[Any]] | None = None) -> pd.DataFrame:
    """The rows whose state is one of `states` and whose parameter columns take one of the
    given values (a missing or empty selection keeps every row)."""
    keep = pd.Series(True, index=frame.index)
    states = list(states or [])
    if states:
        keep &= frame["state"].isin(states)
    for column, values in (params or {}).items():
        values = list(values)
        if values:
            keep &= frame[column].isin(values)
    return frame[keep]


def option_order(value: Any) -> tuple:
    """Sort key for a parameter's values: numbers by size, then text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def sort_trials(frame: pd.DataFrame, by: str, *, descending: bool = True) -> pd.DataFrame:
    """Sorted by one column, missing values last whatever the direction."""
    return frame.sort_values(by, ascending=not descending, na_position="last", kind="stable")


def progress_frame(data: StudyData, *, by: str = "trial") -> pd.DataFrame:
    """Finished trials in order (by trial number, or by finish time), each with its objective
    (None unless it met the SLA) and the best objective so far."""
    if by not in ("trial", "time"):
        raise ValueError(f"by={by!r}: expected 'trial' or 'time'")
    done = [t for t in data.trials if t.finished_at is not None]
    done.sort(key=(lambda t: t.number) if by == "trial" else (lambda t: t.finished_at))
    rows, best = [], None
    for t in done:
        if rules.met_sla(t):
            best = t.objective if best is None else max(best, t.objective)
        rows.append({"trial": t.number, "finished": local_time(t.finished_at), "state": t.state,
                     "outcome": _outcome(t), "config": describe(t.params),
                     TOK_GPU: t.objective, "best so far": best})
    frame = pd.DataFrame(rows, columns=["trial", "finished", "state", "outcome", "config",
                                        TOK_GPU, "best so far"])
    for c in (TOK_GPU, "best so far"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    return frame


def _outcome(t: TrialRecord) -> str:
    if t.state == "complete":
        return "met SLA" if t.meets_sla else "missed SLA"
    return t.state
