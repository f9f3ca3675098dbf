"""Confirmation: the study's top configurations measured again, each in a fresh server, before a
winner is named.

One short measurement on a noisy node can crown a configuration by luck (a lucky round, a warm
page cache, a neighbour that went quiet). So the top K complete trials that met the SLA are
re-run through the same serving path as a trial, in a fresh server each; the winner is the best
confirmed one (see `tuner.verdict.rules.winner`). A confirmation that lands further from the
first measurement than the measured intervals allow is `differs`; one that lands within them is
`confirmed` only when both runs converged, else `inconclusive` (wide intervals that overlap say
little), and said as such wherever the winner is shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tuner.search import head_to_head
from tuner.search.context import StudyContext
from tuner.search.serving import server_for
from tuner.search.trial import serve_and_measure, sweep_for
from tuner.serve.launcher import LaunchFailure
from tuner.spec.sla import SLA
from tuner.spec.space import describe
from tuner.store import TrialRecord
from tuner.store.records import LevelMeasurement
from tuner.verdict.rules import met_sla, objective

DEFAULT_TOP_K = 3
# Without an interval (a level measured in one round), a confirmation differs when its value is
# further than this fraction from the first run's.
FALLBACK_TOLERANCE = 0.10


@dataclass
class Confirmation:
    number: int
    params: dict[str, Any]
    state: str  # confirmed | inconclusive | differs | failed
    first: float  # the trial's objective when it was first measured
    again: float | None  # the confirmation's objective (None when it failed)
    meets_sla: bool | None
    reason: str | None


def candidates(trials: list[TrialRecord], k: int, *, again: bool = False) -> list[TrialRecord]:
    """The top k complete trials that met the SLA, by their first measurement; those confirmed
    already are left out unless `again`."""
    ok = [t for t in trials if met_sla(t)]
    top = sorted(ok, key=lambda t: t.objective, reverse=True)[:k]
    return top if again else [t for t in top if t.confirm_state is None]


def tolerance(first: LevelMeasurement | None, again: LevelMeasurement, gpus: int,
              first_value: float) -> tuple[float, str]:
    """How far apart the two objectives may be (tok/s per GPU), and how that was decided.

    Two independent estimates differ by more than their 95% half-widths combined in quadrature
    about 5% of the time when the configuration performs the same."""
    if first is not None and first.output_tok_s_ci95 is not None \
            and again.output_tok_s_ci95 is not None:
        width = math.hypot(first.output_tok_s_ci95, again.output_tok_s_ci95) / max(gpus, 1)
        return width, f"±{width:,.0f} tok/s/GPU (95% intervals of both runs)"
    width = FALLBACK_TOLERANCE * first_value
    return width, (f"±{width:,.0f} tok/s/GPU ({FALLBACK_TOLERANCE:.0%}: no interval was "
                   "measured, set workload.max_rounds for one)")


def judge(trial: TrialRecord, levels: list[LevelMeasurement], sla: SLA,
          advice: str = "raise workload.max_rounds") -> Confirmation:
    """Compare a re-run's levels with the trial's first measurement (`advice`: what to do where
    they did not converge)."""
    value, best, meets = objective(levels, sla)
    first = trial.objective
    if value is None or best is None:
        return Confirmation(trial.number, trial.params, "failed", first, None, None,
                            "no request succeeded in the confirmation")
    if not meets:
        return Confirmation(trial.number, trial.params, "differs", first, value, False,
                            f"missed the SLA in its confirmation ({value:,.0f} tok/s/GPU at "
                            f"c={best.concurrency}); first run {first:,.0f} met it")
    _, first_best, _ = objective(trial.measurements, sla)
    width, how = tolerance(first_best, best, trial.gpus or 1, first)
    gap = value - first
    if abs(gap) > width:
        return Confirmation(trial.number, trial.params, "differs", first, value, True,
                            f"{gap:+,.0f} tok/s/GPU ({gap / first:+.0%}) from the first run "
                            f"({first:,.0f}), outside {how}: the servers differ, which the "
                            "study's server-to-server spread counts")
    unsettled = [name for name, m in (("first run", first_best), ("confirmation", best))
                 if m is None or m.converged is not True]
    if unsettled:
        # Agreement within intervals that are wide, or absent, says little either way.
        return Confirmation(trial.number, trial.params, "inconclusive", first, value, True,
                            f"{gap:+,.0f} tok/s/GPU from the first run ({first:,.0f}), within "
                            f"{how}, but the {' and the '.join(unsettled)} did not converge "
                            f"({advice})")
    return Confirmation(trial.number, trial.params, "confirmed", first, value, True, None)


def confirm_top(ctx: StudyContext, k: int = DEFAULT_TOP_K, *, again: bool = False,
                ends: float | None = None) -> list[Confirmation]:
    """Re-run the top k trials of the study in `ctx` (a `StudyContext`): head to head where
    there are two or more and their servers can be up together (`tuner.search.head_to_head`,
    which stores each one's confirmation too, within the study's time limit `ends`), else one
    fresh server each, one after another on the node's devices; each verdict is stored."""
    chosen = candidates(ctx.store.trials(ctx.name), k, again=again)
    if not chosen:
        ctx.say("confirmation: no unconfirmed trial among the top "
                f"{k} that met the SLA")
        return []
    met = None
    if len(chosen) >= 2:
        met = (head_to_head.run(ctx, chosen, ends)
               if head_to_head.placements(ctx, chosen) is not None
               else head_to_head.run_in_turn(ctx, chosen))
    if met is not None:
        done = []
        for trial in chosen:
            again = [met[1][trial.number]] if met[1][trial.number] is not None else []
            done.append(_record(ctx, trial, again, judge(
                trial, again, ctx.spec.sla.to_sla(),
                advice="the head-to-head stops once its verdict is decided: its ratio, not "
                       "this figure, ranks the finalists")))
        return done
    ctx.say(f"confirmation: re-running the top {len(chosen)} in a fresh server each")
    done = []
    for trial in chosen:
        ctx.say(f"confirm trial {trial.number}  {describe(trial.params)}  "
                f"(first run {trial.objective:,.0f} tok/s/GPU)")
        plan, server = server_for(ctx, trial.params, list(ctx.inventory.devices),
                                  f"trial-{trial.number:04d}-confirm")
        levels: list[LevelMeasurement] = []
        failed = None
        try:
            serve_and_measure(ctx, server, plan, trial.id, levels,
                              sweep=sweep_for(ctx, trial.params))
        except LaunchFailure as f:
            failed = Confirmation(trial.number, trial.params, "failed", trial.objective, None,
                                  None, f"{f.kind}: {f.reason}")
        done.append(_record(ctx, trial, levels, failed))
    return done


def _record(ctx: StudyContext, trial: TrialRecord, levels: list[LevelMeasurement],
            verdict: Confirmation | None = None) -> Confirmation:
    """Judge a re-run against the trial's first run (unless `verdict` is given), store it and
    say it."""
    verdict = verdict or judge(trial, levels, ctx.spec.sla.to_sla())
    ctx.store.record_confirmation(
        ctx.name, trial.number, state=verdict.state, objective=verdict.again,
        meets_sla=verdict.meets_sla, reason=verdict.reason, measurements=levels,
    )
    ctx.say(f"  -> trial {trial.number}: {verdict.state}"
            + (f" at {verdict.again:,.0f} tok/s/GPU" if verdict.again is not None else "")
            + (f" ({verdict.reason})" if verdict.reason and verdict.state != "confirmed"
               else ""))
    return verdict
