"""Choosing across studies (any GPU types and engines in one database): the configurations whose
measured levels meet a per-user speed and a TTFT target, ranked by cost or by throughput.

A level counts when it met its own study's SLA (no failed requests among it: an operating point
a deploy could use, as `rules.operating_points` says) and reaches the targets. Only the runs
`rules.counted_runs` names count: once a study has confirmations, its confirmations' levels.
Each configuration is offered at its best such level; with one server size per trial, its
cheapest level is also its fastest per device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tuner.spec.errors import BadInput, NoResult
from tuner.spec.gpu_prices import DevicePrice
from tuner.store import StudyRecord, TrialRecord
from tuner.store.records import LevelMeasurement
from tuner.verdict.cost import level_usd_per_mtok, study_price
from tuner.verdict.rules import counted_runs

__all__ = ["BY", "Choice", "Targets", "candidates", "choose", "gap", "meets_targets", "rank"]

BY = ("cost", "throughput")


@dataclass(frozen=True)
class Targets:
    min_tok_s_per_user: float  # per-user p90 tok/s, at least
    ttft_p90_ms: float | None = None  # TTFT p90, at most

    def text(self) -> str:
        ttft = "" if self.ttft_p90_ms is None else f" and TTFT p90 <= {self.ttft_p90_ms:g} ms"
        return f">= {self.min_tok_s_per_user:g} tok/s per user (p90){ttft}"


@dataclass(frozen=True)
class Choice:
    """One configuration (a study's trial) at the level it is offered at."""

    study: StudyRecord
    trial: TrialRecord
    level: LevelMeasurement
    confirmed: bool  # the level is its confirmation's (a re-run in a fresh server)
    usd_per_mtok: float | None  # None: no price for the study's GPU type
    price: DevicePrice | None

    @property
    def tok_s_per_gpu(self) -> float:
        return self.level.output_tok_s_per_gpu


def meets_targets(level: LevelMeasurement, targets: Targets) -> bool:
    """Met its study's SLA and reaches both targets (a figure not measured reaches none)."""
    if not level.meets_sla or level.tok_s_per_user_p90 is None:
        return False
    if level.tok_s_per_user_p90 < targets.min_tok_s_per_user:
        return False
    return targets.ttft_p90_ms is None or (level.ttft_p90_ms is not None
                                           and level.ttft_p90_ms <= targets.ttft_p90_ms)


def candidates(study: StudyRecord, trials: Iterable[TrialRecord],
               targets: Targets) -> list[Choice]:
    """Each configuration of the study with a counted level meeting the targets, at its
    fastest such level (per device: on one server size, also its cheapest)."""
    price = study_price(study)
    found = []
    for trial, levels, confirmed in counted_runs(trials):
        meeting = [m for m in levels if meets_targets(m, targets)]
        if meeting:
            level = max(meeting, key=lambda m: m.output_tok_s_per_gpu)
            found.append(Choice(study, trial, level, confirmed,
                                level_usd_per_mtok(study, trial, level), price))
    return found


def rank(choices: Iterable[Choice], by: str) -> list[Choice]:
    """Cheapest first (`cost`; configurations without a price after every priced one), or
    most output tok/s per device first (`throughput`). Ties keep their order."""
    if by == "cost":
        return sorted(choices, key=lambda c: (c.usd_per_mtok is None, c.usd_per_mtok or 0.0,
                                              -c.tok_s_per_gpu))
    if by == "throughput":
        return sorted(choices, key=lambda c: -c.tok_s_per_gpu)
    raise BadInput(f"--by {by}: use one of {', '.join(BY)}")


def gap(choice: Choice, best: Choice, by: str) -> float | None:
    """How far behind the winner, as a fraction: costlier by (`cost`), or slower per device by
    (`throughput`); None where either has no price."""
    if by == "cost":
        if choice.usd_per_mtok is None or not best.usd_per_mtok:
            return None
        return choice.usd_per_mtok / best.usd_per_mtok - 1
    return 1 - choice.tok_s_per_gpu / best.tok_s_per_gpu if best.tok_s_per_gpu else None


def choose(studies: list[tuple[StudyRecord, list[TrialRecord]]], targets: Targets,
           by: str = "cost") -> list[Choice]:
    """Every configuration of these studies meeting the targets, ranked (`rank`). Raises
    NoResult, naming the fastest per-user speed that met its SLA, when none does."""
    found = [c for study, trials in studies for c in candidates(study, trials, targets)]
    if found:
        return rank(found, by)
    names = ", ".join(s.name for s, _ in studies)
    reach = [m.tok_s_per_user_p90 for _, trials in studies
             for _, levels, _ in counted_runs(trials) for m in levels
             if m.meets_sla and m.tok_s_per_user_p90 is not None]
    seen = (f"the fastest per-user p90 that met its SLA is {max(reach):,.1f} tok/s"
            if reach else "no level met its study's SLA")
    raise NoResult(f"no configuration of {names} reaches {targets.text()} ({seen}): lower "
                   "the targets, or run studies of configurations for lower latency")
