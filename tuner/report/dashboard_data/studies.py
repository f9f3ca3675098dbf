"""One row per study: its summary (state, counts, budget, winner), the overview and the compare."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tuner.report.dashboard_data.labels import STATES, TOK_GPU, USER_P90, local_time
from tuner.report.dashboard_data.source import StudyData
from tuner.report.tables import state_counts
from tuner.spec.errors import NoResult
from tuner.spec.space import describe
from tuner.store import TrialRecord
from tuner.verdict import rules

__all__ = ["StudySummary", "best_of", "compare_frame", "model_name", "overview_frame",
           "sla_text", "sla_user_floor", "summarize"]


@dataclass
class StudySummary:
    name: str
    model: str
    engine: str
    gpu_type: str
    state: str  # empty | running | finished | stopped
    counts: dict[str, int]
    launched: int  # trials that launched a server and reached a verdict (what the budget counts)
    budget: int | None
    best: TrialRecord | None
    started: dt.datetime | None
    finished: dt.datetime | None
    sla: dict[str, Any]
    workload: dict[str, Any]
    # The winner's figure, the one its card and `tuner best` give (`rules.figure`: a
    # confirmation's where it decided), never its first run's beside it.
    best_value: float | None = None


def model_name(model: str) -> str:
    """A model's short name: the last part of a path (the full path is in the study record)."""
    return Path(model).name or model


def best_of(data: StudyData) -> TrialRecord | None:
    """The winner as `tuner best` and the exports define it (`rules.winner`), or None when no
    trial met the SLA."""
    try:
        return rules.winner(data.study, data.trials)
    except NoResult:
        return None


def summarize(data: StudyData) -> StudySummary:
    trials = data.trials
    counts = state_counts(trials)
    budget = (data.study.spec.get("budget") or {}).get("n_trials")
    launched = rules.launched(trials)
    if not trials:
        state = "empty"
    elif counts["running"]:
        state = "running"
    elif budget is not None and launched >= budget:
        state = "finished"
    else:
        state = "stopped"
    ends = [t.finished_at for t in trials if t.finished_at is not None]
    best = best_of(data)
    return StudySummary(
        name=data.study.name, model=model_name(data.study.model), engine=data.study.engine,
        gpu_type=data.study.gpu_type, state=state, counts=counts,
        launched=launched, budget=budget,
        best=best, best_value=None if best is None else rules.figure(best, data.study).value,
        started=min((t.started_at for t in trials), default=None),
        finished=max(ends) if ends and state != "running" else None,
        sla=dict(data.study.spec.get("sla") or {}),
        workload=dict(data.study.spec.get("workload") or {}),
    )


def overview_frame(summaries: list[StudySummary]) -> pd.DataFrame:
    """One row per study: what it tuned, how far it got, and its best figure."""
    columns = ["study", "model", "engine", "GPU type", "state", "complete", "pruned", "failed",
               "infeasible", "running", "budget", f"best {TOK_GPU}", "best trial", "started",
               "finished"]
    rows = [{
        "study": s.name, "model": s.model, "engine": s.engine, "GPU type": s.gpu_type,
        "state": s.state, **{k: s.counts.get(k, 0) for k in STATES}, "budget": s.budget,
        f"best {TOK_GPU}": s.best_value, "best trial": None if s.best is None else s.best.number,
        "started": local_time(s.started), "finished": local_time(s.finished),
    } for s in summaries]
    return pd.DataFrame(rows, columns=columns)


def sla_user_floor(sla: dict[str, Any]) -> float | None:
    """The SLA's per-user speed (p90) as a line on the Pareto chart, if the SLA sets one."""
    v = sla.get("min_tok_s_per_user_p90")
    return None if v is None else float(v)


def sla_text(sla: dict[str, Any]) -> str:
    parts = []
    if sla.get("ttft_p90_ms") is not None:
        parts.append(f"TTFT p90 ≤ {sla['ttft_p90_ms']:,.0f} ms")
    if sla.get("min_tok_s_per_user_p90") is not None:
        parts.append(f"≥ {sla['min_tok_s_per_user_p90']:,.0f} tok/s per user (p90)")
    parts.append("no failed requests")
    return ", ".join(parts)


def compare_frame(datas: list[StudyData]) -> pd.DataFrame:
    """One row per study: hardware and engine, the best configuration and its figures."""
    rows = []
    for data in datas:
        s = summarize(data)
        shown = None if s.best is None else rules.figure(s.best, data.study)  # as its card
        level = (None if shown is None
                 else rules.best_level(shown.levels, rules.study_sla(data.study))[0])
        rows.append({
            "study": s.name, "model": s.model, "engine": s.engine, "GPU type": s.gpu_type,
            "complete": s.counts["complete"], "failed": s.counts["failed"],
            f"best {TOK_GPU}": s.best_value,
            "best config": None if s.best is None else describe(s.best.params),
            "GPUs": None if s.best is None else s.best.gpus,
            "at c": None if level is None else level.concurrency,
            "TTFT p90 ms": None if level is None else level.ttft_p90_ms,
            USER_P90: None if level is None else level.tok_s_per_user_p90,
            "SLA": sla_text(s.sla),
        })
    return pd.DataFrame(rows, columns=["study", "model", "engine", "GPU type", "complete",
                                       "failed", f"best {TOK_GPU}", "best config", "GPUs",
                                       "at c", "TTFT p90 ms", USER_P90, "SLA"])
