"""Measured points (one per trial and level), their Pareto front, and fronts side by side."""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd

from tuner.report.dashboard_data.labels import TOK_GPU, USD_MTOK, USER_P50, USER_P90
from tuner.report.dashboard_data.source import StudyData
from tuner.spec.space import describe
from tuner.verdict.cost import server_hour_usd, study_price, usd_per_mtok
from tuner.verdict.rules import non_dominated

__all__ = ["POINT_COLUMNS", "ParetoFront", "compare_points", "measured_points", "pareto_front",
           "parallelism"]


def parallelism(params: dict[str, Any]) -> str:
    """`TP2`, `TP2×DP2`, `TP1×DP2 EP`, `TP8 ADP EP8`: how the model is split over the GPUs."""
    tp = params.get("tensor_parallel_size") or 1
    dp = params.get("data_parallel_size") or 1
    label = f"TP{tp}" + (f"×DP{dp}" if dp != 1 else "")
    if params.get("enable_attention_dp"):
        label += " ADP"
    ep = params.get("expert_parallel_size")
    if isinstance(ep, int) and ep > 1:
        label += f" EP{ep}"
    elif params.get("enable_expert_parallel"):
        label += " EP"
    return label


POINT_COLUMNS = ["study", "gpu type", "engine", "trial", "state", "concurrency", "parallelism",
                 "series", "config", TOK_GPU, USER_P90, USER_P50, "TTFT p90 ms", "errors",
                 "meets SLA", "GPUs", "tok/s total", USD_MTOK]


def measured_points(data: StudyData) -> pd.DataFrame:
    """One row per trial and concurrency level that was measured, from every trial that has
    measurements (a failed trial's levels included: they show where it broke), with its USD per
    million output tokens (NaN without a price), computed for the whole frame at once."""
    engine = data.study.engine
    rows = []
    for t in data.trials:
        par = parallelism(t.params)
        config = describe(t.params)
        for m in t.measurements:
            rows.append({
                "study": data.study.name, "gpu type": data.study.gpu_type, "engine": engine,
                "trial": t.number, "state": t.state, "concurrency": m.concurrency,
                "parallelism": par, "series": f"{engine} {par}", "config": config,
                TOK_GPU: m.output_tok_s_per_gpu, USER_P90: m.tok_s_per_user_p90,
                USER_P50: m.tok_s_per_user_p50, "TTFT p90 ms": m.ttft_p90_ms,
                "errors": m.errors, "meets SLA": bool(m.meets_sla), "GPUs": t.gpus,
                "tok/s total": m.output_tok_s,
            })
    frame = pd.DataFrame(rows, columns=POINT_COLUMNS)
    for c in (TOK_GPU, USER_P90, USER_P50, "TTFT p90 ms", "GPUs", "tok/s total"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype("float64")
    price = study_price(data.study)
    frame[USD_MTOK] = (float("nan") if price is None else usd_per_mtok(
        server_hour_usd(price.usd_per_hour, frame["GPUs"]), frame["tok/s total"]))
    frame[USD_MTOK] = frame[USD_MTOK].astype("float64")
    return frame


class ParetoFront(NamedTuple):
    """The measured points with an `on front` column, and the front alone sorted along x."""

    points: pd.DataFrame
    front: pd.DataFrame


def pareto_front(points: pd.DataFrame, *, x: str = USER_P90, y: str = TOK_GPU) -> ParetoFront:
    """The points no other point beats on both x and y (both maximized), among those a deploy
    could use: levels of complete trials that met the SLA, as `tuner best --min-tok-s-per-user`
    picks from (`rules.operating_points`, `rules.non_dominated`: with the default axes this is
    the front a Pareto study searched for).

    Points missing either figure, or with no throughput at all (every request failed), are never
    on the front. Of identical points, the first is kept.
    """
    points = points.copy()
    on = pd.Series(False, index=points.index)
    usable = points[points[x].notna() & points[y].notna() & (points[y] > 0)
                    & points["meets SLA"].astype(bool) & (points["state"] == "complete")]
    pairs = list(zip(usable[x], usable[y], strict=True))
    for i in non_dominated(pairs):
        on[usable.index[i]] = True
    points["on front"] = on
    front = points[on].sort_values(x, kind="stable")
    return ParetoFront(points, front)


def compare_points(datas: list[StudyData], *, x: str = USER_P90) -> ParetoFront:
    """Every study's measured points and each study's own Pareto front, side by side."""
    fronts = [pareto_front(measured_points(d), x=x) for d in datas]
    if not fronts:
        empty = pd.DataFrame(columns=[*POINT_COLUMNS, "on front"])
        return ParetoFront(empty, empty)
    return ParetoFront(pd.concat([f.points for f in fronts], ignore_index=True),
                       pd.concat([f.front for f in fronts], ignore_index=True))
