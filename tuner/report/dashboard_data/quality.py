"""What a trial's page shows of its quality gate: its answers that differ beside the
reference's, and its first near-tie and first divergence with both sides' top
log-probabilities at that position."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tuner.measure.quality import Answer
from tuner.measure.quality_compare import Flip, common_prefix, quality_figures
from tuner.report.dashboard_data.source import StudyData
from tuner.store import TrialRecord

__all__ = ["ANSWER_COLUMNS", "FLIP_COLUMNS", "FlipView", "quality_answers", "quality_figures",
           "quality_flips"]

ANSWER_COLUMNS = ["prompt", "asked", "reference", "this trial", "same up to"]
FLIP_COLUMNS = ["token", "reference logprob", "this trial's logprob", "picked by"]


def quality_answers(data: StudyData, trial: TrialRecord) -> pd.DataFrame:
    """The quality gate's answers that differ, side by side: each prompt (its number and text),
    the reference's answer, the trial's, and how many tokens (or characters, where the engine
    named no tokens) they share before the first difference. Empty when all match or either
    side is missing."""
    if trial.quality is None or data.reference is None or not data.reference.answers:
        return pd.DataFrame(columns=ANSWER_COLUMNS)
    rows = []
    pairs = zip(data.reference.answers, trial.quality.answers, strict=False)
    for i, (r, a) in enumerate(pairs):
        ref, got = Answer.from_dict(r), Answer.from_dict(a)
        if got.error is None and ref.units() == got.units():
            continue
        asked = ref.prompt if isinstance(ref.prompt, str) else f"{len(ref.prompt)} token ids"
        rows.append({"prompt": i, "asked": asked, "reference": ref.text,
                     "this trial": got.text if got.error is None else f"error: {got.error}",
                     "same up to": common_prefix(ref.units(), got.units())})
    return pd.DataFrame(rows, columns=ANSWER_COLUMNS)


@dataclass(frozen=True)
class FlipView:
    """One flip as the page sets it out: a title, its line, and both sides' top
    log-probabilities at that position in one table (blank where a side did not list it)."""

    title: str
    line: str
    frame: pd.DataFrame


def _frame(flip: Flip) -> pd.DataFrame:
    """Every token either side listed, the reference's highest first; '–' where a side did not
    list it."""
    tokens = list(dict.fromkeys([*flip.reference_top, *flip.trial_top]))
    tokens.sort(key=lambda t: -flip.reference_top.get(t, float("-inf")))
    picked = {flip.reference_token: "reference", flip.trial_token: "this trial"}
    if flip.reference_token == flip.trial_token:
        picked = {}

    def shown(value: float | None) -> str:
        return "–" if value is None else f"{value:.4f}"

    rows = [{"token": repr(t), "reference logprob": shown(flip.reference_top.get(t)),
             "this trial's logprob": shown(flip.trial_top.get(t)),
             "picked by": picked.get(t, "")} for t in tokens]
    return pd.DataFrame(rows, columns=FLIP_COLUMNS)


def quality_flips(trial: TrialRecord) -> list[FlipView]:
    """The trial's first near-tie and first divergence (those it had), in that order."""
    q = trial.quality
    if q is None or not q.flips:
        return []
    out = []
    for key, title in (("first_near_tie", "First near-tie"),
                       ("first_divergence", "First divergence")):
        if q.flips.get(key):
            flip = Flip.from_dict(q.flips[key])
            out.append(FlipView(title, flip.line(), _frame(flip)))
    return out
