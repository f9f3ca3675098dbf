"""Each trial's load curve: its measured levels in order of load (the curve a load search, or a
fixed sweep, traced), with the SLA's lines and the highest load that met the SLA marked."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tuner.report.dashboard_data.labels import TOK_GPU, USER_P90
from tuner.report.dashboard_data.source import StudyData
from tuner.report.tables import LOAD_AT_SLA, level_load, load_at_sla
from tuner.spec.space import describe

__all__ = ["CURVE_COLUMNS", "LoadCurves", "load_curves"]

CURVE_COLUMNS = ["trial", "state", "config", "load", "order", TOK_GPU, "TTFT p90 ms", USER_P90,
                 "meets SLA", "cap engaged", "at SLA", LOAD_AT_SLA, "load search"]


@dataclass
class LoadCurves:
    """The curves as a frame (one row per measured level, sorted by trial then load; `order`
    is the level's place in its sweep, `at SLA` marks the trial's highest load that met the
    SLA), what the load is (`concurrency` or `req/s`), and the SLA's lines (None: not set)."""

    frame: pd.DataFrame
    load: str
    ttft_p90_ms: float | None
    min_tok_s_per_user_p90: float | None


def load_curves(data: StudyData) -> LoadCurves | None:
    """The load curves of every trial that measured a level (a failed trial's too: they show
    where it broke); None when none has."""
    rows, open_loop = [], False
    for t in data.trials:
        at_sla = load_at_sla(t)
        for order, m in enumerate(t.measurements):
            open_loop = open_loop or m.request_rate is not None
            rows.append({
                "trial": t.number, "state": t.state, "config": describe(t.params),
                "load": level_load(m), "order": order, TOK_GPU: m.output_tok_s_per_gpu,
                "TTFT p90 ms": m.ttft_p90_ms, USER_P90: m.tok_s_per_user_p90,
                "meets SLA": bool(m.meets_sla), "cap engaged": m.cap_engaged,
                "at SLA": at_sla is not None and level_load(m) == at_sla and bool(m.meets_sla),
                LOAD_AT_SLA: at_sla, "load search": t.load_search,
            })
    if not rows:
        return None
    frame = pd.DataFrame(rows, columns=CURVE_COLUMNS).sort_values(["trial", "load", "order"],
                                                                  kind="stable")
    for c in ("load", TOK_GPU, "TTFT p90 ms", USER_P90, LOAD_AT_SLA):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    sla = data.study.spec.get("sla") or {}
    return LoadCurves(frame.reset_index(drop=True), "req/s" if open_loop else "concurrency",
                      sla.get("ttft_p90_ms"), sla.get("min_tok_s_per_user_p90"))
