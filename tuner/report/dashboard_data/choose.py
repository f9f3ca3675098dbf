"""The Choose page's data: every study's measured points on one frame, coloured by GPU type and
engine, and the configurations meeting a per-user target, ranked as `tuner choose` ranks them
(`tuner.verdict.choose`), with the runners-up's gap to the winner."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from tuner.report.choice import CHOICE_COLUMNS, GAP, choices_frame
from tuner.report.dashboard_data.labels import USD_MTOK, USER_P90
from tuner.report.dashboard_data.points import POINT_COLUMNS
from tuner.report.dashboard_data.source import StudyData
from tuner.spec.errors import NoResult
from tuner.verdict.choose import Choice, Targets, choose

__all__ = ["CHART_LIMIT", "CHOICE_COLUMNS", "GAP", "HARDWARE", "Drawn", "Ranking",
           "choice_points", "drawn_points", "rank_studies"]

# One colour per GPU type and engine.
HARDWARE = "GPU · engine"
# The most marks the Choose chart draws: a browser on 2 cores takes about 1.5 s to draw the
# 18,000 levels of 5,000 trials, and a few tenths to draw 1,000 (bench/dashboard_browser.py).
CHART_LIMIT = 1000


def choice_points(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The studies' `measured_points` frames as one, each row labelled with its GPU type and
    engine (`HARDWARE`), built column-wise (a 5,000-trial database is tens of thousands of
    rows)."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=[*POINT_COLUMNS, HARDWARE])
    points = pd.concat(frames, ignore_index=True)
    points[HARDWARE] = points["gpu type"].astype(str) + " · " + points["engine"].astype(str)
    points[USD_MTOK] = points[USD_MTOK].astype("float64")
    return points


class Ranking(NamedTuple):
    """The ranked configurations (the winner first) and their table; or, when none meets the
    targets, no configuration and the one-line reason `tuner choose` gives."""

    choices: list[Choice]
    table: pd.DataFrame
    reason: str | None


def rank_studies(datas: list[StudyData], targets: Targets, by: str) -> Ranking:
    """`tuner choose` over these studies: the same rule, the same ranking, the same table."""
    try:
        ranked = choose([(d.study, d.trials) for d in datas], targets, by)
    except NoResult as e:
        return Ranking([], pd.DataFrame(columns=CHOICE_COLUMNS), str(e))
    return Ranking(ranked, choices_frame(ranked, by), None)


class Drawn(NamedTuple):
    """The levels the Choose chart draws, and how many of each kind."""

    points: pd.DataFrame
    front: int  # levels on their GPU type and engine's front: always drawn
    sampled: int  # of the other levels, drawn as an even sample
    left_out: int  # the other levels not drawn


def drawn_points(points: pd.DataFrame, y: str, *, limit: int = CHART_LIMIT) -> Drawn:
    """The levels to draw (those with both figures), at most `limit` unless the fronts alone hold
    more: up to it, every level; beyond, every level on its GPU type and engine's front (no
    other level of the same hardware is faster per user and at least as good on `y`: cheaper,
    or more tok/s per GPU), among all its levels and among those that met their SLA, then an
    even, seeded sample of the rest. What the chart leaves out is never a level a viewer would
    pick from it; the ranking and its table always use every level."""
    points = points[points[USER_P90].notna() & points[y].notna()]
    if len(points) <= limit:
        return Drawn(points, len(points), 0, 0)
    lower_is_better = y == USD_MTOK
    on_front = pd.Series(False, index=points.index)
    for group in (points, points[points["meets SLA"].astype(bool)]):
        on_front |= _front(group, y, lower_is_better).reindex(points.index, fill_value=False)
    front = points[on_front]
    rest = points[~on_front]
    take = min(len(rest), max(limit - len(front), 0))
    sample = rest.sample(n=take, random_state=0) if take else rest.iloc[:0]
    drawn = pd.concat([front, sample]).sort_index()
    return Drawn(drawn, len(front), take, len(rest) - take)


def _front(points: pd.DataFrame, y: str, lower_is_better: bool) -> pd.Series:
    """Per HARDWARE, whether each level is on the front of (per-user speed up, `y` best)."""
    ordered = points.sort_values([HARDWARE, USER_P90, y],
                                 ascending=[True, False, lower_is_better], kind="stable")
    values = ordered[y] if lower_is_better else -ordered[y]
    best_before = values.groupby(ordered[HARDWARE]).transform(
        lambda v: v.cummin().shift(fill_value=float("inf")))
    return (values < best_before).reindex(points.index)
