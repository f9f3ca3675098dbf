"""The head-to-head's rules, apart from its servers: each challenger's verdict from rounds
paired in time, when the rounds may stop, the study's pick and why, and their lines (the study,
`tuner best` and the dashboard print the same)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.measure.stats import paired_ratio
from tuner.store import HeadToHead, TrialRecord
from tuner.store.records import LevelMeasurement

if TYPE_CHECKING:
    from tuner.measure.loadgen import LevelRun
    from tuner.serve.engines import LaunchPlan
    from tuner.serve.launcher import ServerProcess

AHEAD, BEHIND, TIED = "ahead", "behind", "tied"
MIN_PAIRS = 3


@dataclass
class Finalist:
    trial: TrialRecord
    level: LevelMeasurement  # its best first-run level: the load it is compared at
    plan: LaunchPlan | None = None
    server: ServerProcess | None = None
    runs: list[LevelRun] = field(default_factory=list)
    rounds: list[LevelMeasurement] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    trial: int
    ratio: float
    low: float | None
    high: float | None
    pairs: int
    unit: str = "rounds"  # what is paired: rounds side by side, or servers in turn

    @property
    def call(self) -> str:
        if self.low is not None and self.low > 1:
            return AHEAD
        if self.high is not None and self.high < 1:
            return BEHIND
        return TIED

    def line(self, leader: int) -> str:
        return ratio_line(self.to_dict(), leader)

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.trial, "ratio": self.ratio, "low": self.low, "high": self.high,
                "pairs": self.pairs, "unit": self.unit, "verdict": self.call}


def ratio_line(v: dict[str, Any], leader: int) -> str:
    """A challenger's verdict in one line, as the study and `tuner best` print it (`v` as
    stored: trial, ratio, low, high, pairs, verdict)."""
    span = "" if v["low"] is None else f" [95% {v['low']:.3f}-{v['high']:.3f}]"
    return (f"trial {v['trial']} / trial {leader}: {v['ratio']:.3f}{span} over {v['pairs']} "
            f"pairs of {v.get('unit', 'rounds')}: {v['verdict']}")


def summary_lines(h: HeadToHead) -> list[str]:
    """A stored head-to-head in lines: how it ran, each challenger's verdict, the pick."""
    how = ("servers up together, rounds alternating" if h.together
           else "fresh servers in turn, mirrored")
    return ([f"head-to-head of {len(h.ratios) + 1} finalists ({how}): pick trial {h.pick} "
             f"({h.reason})"] + [f"  {ratio_line(v, h.leader)}" for v in h.ratios])


def verdicts(leader: Finalist, challengers: list[Finalist]) -> list[Verdict]:
    """Each challenger's ratio to the leader over the pairs both have."""
    out = []
    for c in challengers:
        n = min(len(leader.rounds), len(c.rounds))
        base = [m.output_tok_s_per_gpu for m in leader.rounds[:n]]
        other = [m.output_tok_s_per_gpu for m in c.rounds[:n]]
        if n == 0 or not all(base) or not all(other):
            continue
        ratio, low, high = paired_ratio(base, other)
        out.append(Verdict(c.trial.number, ratio, low, high, n))
    return out


def settled(found: list[Verdict], target: float) -> bool:
    """Every challenger is decided (ahead or behind), or its interval is within `target` of its
    ratio both ways (tied, as far as this measurement can tell)."""
    return all(v.call != TIED or (v.low is not None and v.high / v.low <= (1 + target) ** 2)
               for v in found)


def mean_ttft(f: Finalist) -> float:
    values = [m.ttft_p90_ms for m in f.rounds if m.ttft_p90_ms is not None]
    return sum(values) / len(values) if values else math.inf


def ttft_lower(f: Finalist, g: Finalist) -> bool:
    """Whether f's TTFT p90 is lower than g's by more than the rounds' noise: the 95% interval
    of their paired ratio (rounds side by side, as for throughput) lies under 1."""
    pairs = [(a.ttft_p90_ms, b.ttft_p90_ms) for a, b in zip(f.rounds, g.rounds, strict=False)
             if a.ttft_p90_ms and b.ttft_p90_ms]
    if len(pairs) < MIN_PAIRS:
        return False
    _, _, high = paired_ratio([b for _, b in pairs], [a for a, _ in pairs])
    return high is not None and high < 1


def pick(leader: Finalist, challengers: list[Finalist], found: list[Verdict]
         ) -> tuple[Finalist, str]:
    """The study's pick among the finalists, and why: a challenger only when it is ahead;
    between tied ones, the one on fewer devices, then the one whose TTFT p90 is lower than every
    other's by more than the rounds' noise, else the first measured (a choice the measurement
    cannot make, said as such: picking on noise would name another winner each run)."""
    by_number = {c.trial.number: c for c in challengers}
    ahead = [v for v in found if v.call == AHEAD]
    if ahead:
        best = max(ahead, key=lambda v: v.ratio)
        return by_number[best.trial], (f"trial {best.trial} is ahead of trial "
                                       f"{leader.trial.number} by {best.ratio - 1:.1%}")
    tied = [leader] + [by_number[v.trial] for v in found if v.call == TIED]
    if len(tied) == 1:
        return leader, "every challenger is behind it"
    fewest = min(f.trial.gpus or 1 for f in tied)
    on_fewest = [f for f in tied if (f.trial.gpus or 1) == fewest]

    def others(chosen: Finalist) -> str:
        return ", ".join(str(f.trial.number) for f in tied if f is not chosen)

    if len(on_fewest) == 1:
        return on_fewest[0], f"tied with trial {others(on_fewest[0])}: chosen for fewer devices"
    quicker = [f for f in on_fewest if all(ttft_lower(f, g) for g in on_fewest if g is not f)]
    if quicker:
        chosen = quicker[0]
        return chosen, (f"tied with trial {others(chosen)}: chosen for its lower TTFT p90 in "
                        f"the head-to-head ({mean_ttft(chosen):.0f} ms, lower beyond the "
                        "rounds' noise)")
    chosen = min(on_fewest, key=lambda f: f.trial.number)
    return chosen, (f"tied with trial {others(chosen)}: neither throughput nor TTFT tells them "
                    "apart here; chosen as the first measured")
