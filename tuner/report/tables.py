"""Tables of studies and trials, shaped as pandas frames (pure functions; the CLI only prints)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tuner.measure.metrics import confidence_text
from tuner.measure.quality_compare import quality_figures
from tuner.spec.errors import NoResult
from tuner.store import StudyRecord, TrialRecord
from tuner.store.records import LevelMeasurement, QualityCheck
from tuner.verdict.cost import level_usd_per_mtok, trial_server_hour_usd, usd_per_mtok
from tuner.verdict.rules import best_level, figure, study_sla, winner

# Which run a trial's figure comes from (`rules.figure`): first run, confirmation, head-to-head.
FROM = "from"
# The column of a trial's objective, in the CLI's tables and the dashboard's alike.
TOK_GPU = "tok/s/GPU"
# The highest load (concurrency, or requests/s open loop) of a trial that met the SLA.
LOAD_AT_SLA = "load at SLA"
# USD per million output tokens at a level (tuner.verdict.cost), in every table that shows it.
USD_MTOK = "USD/Mtok"
# The per-user decode speed 90% of a level's requests reach.
USER_P90 = "tok/s/user p90"
# The trial's answers against the study's reference (the quality gate).
QUALITY = "quality"


def quality_text(q: QualityCheck | None) -> str | None:
    """A trial's quality figures in one cell, as every table and `tuner best` write them: the
    verdict, the answers by verdict, logprob divergence, task accuracy (with task checks) and
    the gate's seconds."""
    if q is None:
        return None
    return f"{'passed' if q.passed else 'FAILED'}: {quality_figures(q)}, gate {q.gate_s:.1f} s"


def _params_text(params: dict) -> str:
    from tuner.spec.space import describe

    return describe(params)


def level_load(m: LevelMeasurement) -> float:
    """A level's load: its offered request rate (open loop), else its concurrency."""
    return m.concurrency if m.request_rate is None else m.request_rate


def load_at_sla(t: TrialRecord) -> float | None:
    """The highest load of the trial that met the SLA: what its load search found, or for a
    fixed sweep its highest measured level that met it; None when none did, and for a failed
    trial (crashed, or failed the quality gate: its load is not one to serve at)."""
    if t.state == "failed":
        return None
    load = (t.load_at_sla if t.load_search is not None
            else max((level_load(m) for m in t.measurements if m.meets_sla), default=None))
    # The store keeps a float; a whole number (every concurrency) reads as one.
    return int(load) if isinstance(load, float) and load.is_integer() else load


def trial_row(t: TrialRecord, study: StudyRecord | None = None) -> dict[str, Any]:
    """The cells every trials table shows, each written here once: trial, state, config, its
    figure (`tok/s/GPU`: the run that decided its verdict, `rules.figure`) and which run that
    is (`from`), the SLA verdict (met, missed or None), the quality gate's figures (`quality`),
    the highest load that met it (`load at SLA`), GPUs, failure kind and reason."""
    shown = figure(t, study)
    return {
        "trial": t.number,
        "state": t.state,
        "config": _params_text(t.params),
        TOK_GPU: shown.value,
        FROM: shown.source if shown.value is not None else None,
        "SLA": None if t.meets_sla is None else ("met" if t.meets_sla else "missed"),
        QUALITY: quality_text(t.quality),
        LOAD_AT_SLA: load_at_sla(t),
        "GPUs": t.gpus,
        "failure": t.failure_kind,
        "reason": t.failure_reason,
    }


def failure_text(row: dict[str, Any]) -> str | None:
    """A `trial_row`'s failure as one cell, `kind: reason` (a pruned trial's: why it was
    pruned); None when the trial did not fail."""
    if row["state"] == "pruned":
        return f"pruned: {row['reason']}"
    return f"{row['failure']}: {row['reason']}" if row["failure"] else None


def objective_usd_per_mtok(study: StudyRecord, t: TrialRecord) -> float | None:
    """USD per million output tokens at the level a complete trial's figure comes from."""
    if t.state != "complete":
        return None
    level = best_level(figure(t, study).levels, study_sla(study))[0]
    return None if level is None else level_usd_per_mtok(study, t, level)


def trials_frame(trials: list[TrialRecord], study: StudyRecord | None = None) -> pd.DataFrame:
    """What `tuner status` prints: trial, state, config, tok/s/GPU, with the study the USD per
    million output tokens at the same level, SLA, quality, load at SLA, gpus, reason."""
    rows = []
    for t in trials:
        row = trial_row(t, study)
        cost = {} if study is None else {USD_MTOK: objective_usd_per_mtok(study, t)}
        rows.append({**row, **cost, "gpus": row["GPUs"], "reason": failure_text(row)})
    cost_column = [] if study is None else [USD_MTOK]
    # object dtype keeps ints as ints and None as None (no float coercion for display)
    return pd.DataFrame(rows, columns=["trial", "state", "config", TOK_GPU, FROM, *cost_column,
                                       "SLA",
                                       QUALITY,
                                       LOAD_AT_SLA, "gpus", "reason"], dtype=object)


def state_counts(trials: list[TrialRecord]) -> dict[str, int]:
    counts = {"complete": 0, "pruned": 0, "failed": 0, "infeasible": 0, "running": 0}
    for t in trials:
        counts[t.state] = counts.get(t.state, 0) + 1
    return counts


def studies_frame(studies: list[StudyRecord], trials_of) -> pd.DataFrame:
    """What `tuner status` prints per study; its best is `tuner best`'s winner (`rules.winner`:
    confirmations first), with the figure `tuner best` heads with."""
    rows = []
    for s in studies:
        trials = trials_of(s.name)
        try:
            best: TrialRecord | None = winner(s, trials)
        except NoResult:
            best = None
        rows.append({"study": s.name, "engine": s.engine, "gpu type": s.gpu_type,
                     **state_counts(trials),
                     "best tok/s/GPU": None if best is None else figure(best, s).value,
                     f"best {USD_MTOK}": None if best is None else objective_usd_per_mtok(s, best),
                     "best trial": None if best is None else best.number,
                     "created": s.created_at.strftime("%Y-%m-%d %H:%M")})
    return pd.DataFrame(rows)


def measurements_frame(levels: list[LevelMeasurement],
                       server_hour: float | None = None) -> pd.DataFrame:
    """One row per level, in the order measured. `request_rate` is the offered requests/s of
    an open-loop level (None: closed loop at `concurrency`), `achieved_request_rate` the rate
    its requests were sent at and `capped_requests` how many waited for the in-flight cap (0:
    it never engaged); `tok/s 95%` is `confidence_text`; `usd_per_mtok` is USD per million
    output tokens at a server-hour of `server_hour` USD (`trial_server_hour_usd`; None: no
    price)."""
    cols = ["concurrency", "request_rate", "achieved_request_rate", "capped_requests",
            "requests", "errors", "rounds", "output_tok_s", "output_tok_s_per_gpu", "tok/s 95%",
            "usd_per_mtok", "ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms", "tok_s_per_user_p50",
            "tok_s_per_user_p90", "goodput_rps", "meets_sla"]
    computed = {"tok/s 95%": confidence_text,
                "usd_per_mtok": lambda m: usd_per_mtok(server_hour, m.output_tok_s)}
    rows = [{c: computed[c](m) if c in computed else getattr(m, c) for c in cols}
            for m in levels]
    return pd.DataFrame(rows, columns=cols)


def trial_measurements_frame(study: StudyRecord, trial: TrialRecord, *,
                             confirmation: bool = False) -> pd.DataFrame:
    """`measurements_frame` of a trial's first run (or its confirmation), priced at the
    study's device-hour."""
    levels = trial.confirmation if confirmation else trial.measurements
    return measurements_frame(levels, trial_server_hour_usd(study, trial))
