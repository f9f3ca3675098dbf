"""What a trial's page shows of the study's head-to-head: its finalists' rounds over time (so
a drift of the machine shows, and that it moved both alike), and the verdicts in lines."""

from __future__ import annotations

import pandas as pd

from tuner.report.dashboard_data.labels import TOK_GPU
from tuner.store import StudyRecord, TrialRecord
from tuner.verdict.finalists import summary_lines

__all__ = ["H2H_COLUMNS", "head_to_head_frame", "head_to_head_lines"]

H2H_COLUMNS = ["trial", "pair", "at", TOK_GPU, "TTFT p90 ms"]


def head_to_head_frame(study: StudyRecord, trial: TrialRecord) -> pd.DataFrame | None:
    """Every round of the head-to-head the trial took part in, in time order; None where it
    took part in none."""
    h = study.head_to_head
    if h is None or not any(r["trial"] == trial.number for r in h.rounds):
        return None
    rows = [{"trial": str(r["trial"]), "pair": r["pair"], "at": pd.Timestamp(r["at"]),
             TOK_GPU: r["tok_s_per_gpu"], "TTFT p90 ms": r["ttft_p90_ms"]} for r in h.rounds]
    return pd.DataFrame(rows, columns=H2H_COLUMNS).sort_values("at", ignore_index=True)


def head_to_head_lines(study: StudyRecord) -> list[str]:
    return [] if study.head_to_head is None else summary_lines(study.head_to_head)
