"""The Choose page's data: every study's measured points on one frame, coloured by GPU type and
engine, and the configurations meeting a per-user target, ranked as `tuner choose` ranks them
(`tuner.search.choose`), with the runners-up's gap to the winner."""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from tuner.report.choice import CHOICE_COLUMNS, GAP, choices_frame
from tuner.report.dashboard_data.labels import USD_MTOK
from tuner.report.dashboard_data.points import POINT_COLUMNS
from tuner.report.dashboard_data.source import StudyData
from tuner.search.choose import Choice, Targets, choose
from tuner.spec.errors import NoResult

__all__ = ["CHOICE_COLUMNS", "GAP", "HARDWARE", "Ranking", "choice_points", "rank_studies"]

# One colour per GPU type and engine.
HARDWARE = "GPU · engine"


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
