"""The ranked configurations of `tuner choose` as one table, for the terminal and the dashboard's
Choose page alike (pure; `tuner.verdict.choose` ranks)."""

from __future__ import annotations

import pandas as pd

from tuner.report.tables import TOK_GPU, USD_MTOK, USER_P90
from tuner.spec.space import describe
from tuner.verdict.choose import Choice, gap

__all__ = ["CHOICE_COLUMNS", "GAP", "choices_frame"]

GAP = "gap to winner"
CHOICE_COLUMNS = ["rank", "study", "gpu type", "engine", "trial", "config", "run", "at c",
                  TOK_GPU, USD_MTOK, USER_P90, "TTFT p90 ms", "GPUs", "USD/device-h", GAP]


def choices_frame(ranked: list[Choice], by: str) -> pd.DataFrame:
    """One row per configuration, the winner first: where it ran, the level it is offered at,
    its cost and its gap to the winner (a fraction: costlier by, or slower per GPU by)."""
    rows = [{
        "rank": i + 1, "study": c.study.name, "gpu type": c.study.gpu_type,
        "engine": c.study.engine, "trial": c.trial.number, "config": describe(c.trial.params),
        "run": "confirmation" if c.confirmed else "first run", "at c": c.level.concurrency,
        TOK_GPU: c.tok_s_per_gpu, USD_MTOK: c.usd_per_mtok,
        USER_P90: c.level.tok_s_per_user_p90, "TTFT p90 ms": c.level.ttft_p90_ms,
        "GPUs": c.trial.gpus, "USD/device-h": None if c.price is None else c.price.usd_per_hour,
        GAP: gap(c, ranked[0], by),
    } for i, c in enumerate(ranked)]
    return pd.DataFrame(rows, columns=CHOICE_COLUMNS)
