"""The search's domain rules, each written once and called wherever it applies: the identity of a
configuration, what spends the budget, the level a trial's objective comes from, and the winner.

The study loop, confirmation, the planner, the dry run, the exports, the CLI's tables and the
dashboard all ask these functions; none keeps a copy. They are pure functions over plain records,
so the dashboard can import them without the serving path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tuner.measure.metrics import sla_violations, violation_score
from tuner.measure.stats import server_spread, with_server_spread
from tuner.spec.errors import NoResult
from tuner.spec.sla import SLA
from tuner.spec.study_spec import SLASpec
from tuner.store import StudyRecord, TrialRecord
from tuner.store.records import (
    LevelMeasurement,
    config_key,
    counts_toward_budget,
    settles_configuration,
)

__all__ = ["best_level", "config_key", "counted_runs", "counts_toward_budget",
           "incumbent_floor", "interval", "is_confirmed", "latency_miss", "launched", "met_sla",
           "non_dominated", "objective", "operating_points", "pareto_front", "pareto_values",
           "pick_for_user", "settled", "study_sla", "winner"]


def launched(trials: Iterable[TrialRecord]) -> int:
    """How many of these trials spent the budget (`counts_toward_budget`)."""
    return sum(1 for t in trials if counts_toward_budget(t.state, t.failure_kind))


def settled(trials: Iterable[TrialRecord]) -> dict[str, TrialRecord]:
    """The configurations these trials settle (`settles_configuration`, over the trials that
    count toward the budget), each with its last such trial: a single transient failure leaves
    its configuration open for one retry."""
    counted: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if counts_toward_budget(t.state, t.failure_kind):
            counted.setdefault(config_key(t.params), []).append(t)
    return {key: ts[-1] for key, ts in counted.items()
            if settles_configuration([(t.state, t.failure_kind) for t in ts])}


def best_level(levels: list[LevelMeasurement],
               sla: SLA) -> tuple[LevelMeasurement | None, bool]:
    """The level a trial's objective comes from, and whether it met the SLA.

    The fastest output tok/s per GPU among levels that meet the SLA; when none does, the level
    closest to meeting it (the smallest sum of its SLA violations, as Optuna ranks them; ties to
    the faster), so a near miss ranks as a near miss; (None, False) when no request succeeded.
    Ties otherwise go to the earlier level.
    """
    feasible = [m for m in levels if m.meets_sla]
    if feasible:
        return max(feasible, key=lambda m: m.output_tok_s_per_gpu), True
    measured = [m for m in levels if m.requests > m.errors]
    if measured:
        return min(measured, key=lambda m: (violation_score(sla_violations(m, sla)),
                                            -m.output_tok_s_per_gpu)), False
    return None, False


def objective(
    levels: list[LevelMeasurement], sla: SLA,
) -> tuple[float | None, LevelMeasurement | None, bool]:
    """The trial's value (output tok/s per GPU at its `best_level`), that level, and whether it
    met the SLA."""
    level, meets = best_level(levels, sla)
    return (None if level is None else level.output_tok_s_per_gpu), level, meets


def latency_miss(level: LevelMeasurement, sla: SLA) -> str | None:
    """Why a measured level misses a latency target (its TTFT p90 over the target, or its
    per-user speed p90 under the floor), or None. A sweep's levels climb in load and latency
    only grows with load, so once a level misses, no higher level can meet that target: the
    sweep skips them. Errors are not latency: a level with failed requests says nothing of the
    next one's speed."""
    if sla.ttft_p90_ms is not None and level.ttft_p90_ms is not None \
            and level.ttft_p90_ms > sla.ttft_p90_ms:
        return f"TTFT p90 {level.ttft_p90_ms:,.0f} ms over the SLA's {sla.ttft_p90_ms:,.0f} ms"
    floor = sla.min_tok_s_per_user_p90
    if floor is not None and level.tok_s_per_user_p90 is not None \
            and level.tok_s_per_user_p90 < floor:
        return (f"per-user p90 {level.tok_s_per_user_p90:,.1f} tok/s under the SLA's "
                f"{floor:,.1f}")
    return None


def interval(level: LevelMeasurement) -> tuple[float, float]:
    """The 95% interval of a level's output tok/s per GPU (a point for a single round)."""
    value = level.output_tok_s_per_gpu
    if not level.output_tok_s_ci95 or not level.output_tok_s:
        return value, value
    half = level.output_tok_s_ci95 * value / level.output_tok_s
    return value - half, value + half


def server_spread_of(trials: Iterable[TrialRecord]) -> tuple[float, int] | None:
    """The study's server-to-server spread (`tuner.measure.stats.server_spread`) from its
    trials measured in two servers (first run and confirmation), with how many there are; None
    before any."""
    pairs = [(t.objective, t.confirm_objective) for t in trials
             if t.objective and t.confirm_objective
             and t.confirm_state in ("confirmed", "inconclusive", "differs")]
    spread = server_spread(pairs)
    return None if spread is None else (spread, len(pairs))


def server_spread_line(trials: Iterable[TrialRecord], best: TrialRecord) -> str | None:
    """The study's server-to-server spread in one line, with `best`'s figure as seen from
    another server (its confirmation's where it has one); None before any trial was measured
    in two servers."""
    trials = list(trials)
    spread = server_spread_of(trials)
    if spread is None or best.objective is None:
        return None
    levels = best.confirmation if best.confirm_objective is not None else best.measurements
    value = best.confirm_objective if best.confirm_objective is not None else best.objective
    level = next((m for m in levels if m.output_tok_s_per_gpu == value), None)
    low, high = interval(level) if level is not None else (value, value)
    half = with_server_spread(value, (high - low) / 2, *spread)
    return (f"server to server: a figure strays {spread[0]:.1%} (sd/mean) from its "
            f"configuration's between servers here ({spread[1]} configuration(s) measured in "
            f"two servers), so trial {best.number}'s {value:,.0f} tok/s/GPU is ±{half:,.0f} "
            "(95%) against a figure from another server; pruning against it uses that")


# Until a study has measured its server-to-server spread (its confirmations do), a figure from
# another server is taken as uncertain by this much beyond its own interval: two servers of one
# configuration measured 14% apart on this project's machines (issue 43), and a trial pruned 5%
# under another server's figure had won its head-to-head by 18% in another run (issue 50).
UNMEASURED_SERVER_SPREAD = 0.15


def incumbent_floor(trials: Iterable[TrialRecord], sla: SLA) -> float | None:
    """The figure a trial must be able to beat to stay in the race: the best confirmed
    objective (as `winner` ranks); before any confirmation, the lower end of the 95% interval
    of the best SLA-meeting trial's objective level. None while no trial met the SLA. A trial
    whose interval lies entirely under it is clearly slower, and is pruned.

    A figure taken in another server carries the study's server-to-server spread: once one is
    known (its confirmations measured it), the floor is the lower end of the incumbent's
    interval widened by it; before, that lower end less UNMEASURED_SERVER_SPREAD."""
    trials = list(trials)
    spread = server_spread_of(trials)
    confirmed = [t for t in trials if is_confirmed(t)]
    if confirmed:
        if spread is None:
            return max(t.confirm_objective for t in confirmed)
        return max(t.confirm_objective - with_server_spread(t.confirm_objective, None, *spread)
                   for t in confirmed)
    floors = []
    for t in trials:
        if met_sla(t):
            level, _ = best_level(t.measurements, sla)
            if level is not None:
                floors.append(interval(level)[0] * (1 - UNMEASURED_SERVER_SPREAD))
    return max(floors, default=None)


def study_sla(study: StudyRecord) -> SLA:
    """The SLA a stored study's levels were judged against."""
    return SLASpec.model_validate(study.spec.get("sla") or {}).to_sla()


def met_sla(trial: TrialRecord) -> bool:
    """A complete trial whose first run met the SLA: a candidate for confirmation and winning."""
    return trial.state == "complete" and bool(trial.meets_sla) and trial.objective is not None


def is_confirmed(trial: TrialRecord) -> bool:
    """Re-run in a fresh server and met the SLA again, whatever the verdict on its value
    (confirmed, inconclusive or differs: the verdict is shown beside the winner, and only
    `confirmed` is ever called confirmed)."""
    return (trial.confirm_state in ("confirmed", "inconclusive", "differs")
            and bool(trial.confirm_meets_sla) and trial.confirm_objective is not None)


@dataclass(frozen=True)
class Figure:
    """A configuration's one figure: the run that decided its verdict, and its other run.

    Its head-to-head's rounds (or its confirmation in a fresh server) where they met the SLA,
    else its first run. Every place that shows a trial's figure (`tuner best` and `status`, the
    export, the dashboard) takes this one."""

    value: float | None
    levels: list[LevelMeasurement]  # the run it comes from
    source: str  # "head-to-head", "confirmation" or "first run"
    other: float | None = None  # the other run's figure, where there is one
    other_source: str | None = None
    why: str | None = None  # the confirmation's verdict and reason, where the runs differ

    def other_text(self) -> str | None:
        """The other run, labelled as a run, with why the two differ."""
        if self.other is None:
            return None
        why = f": {self.why}" if self.why else ""
        return f"{self.other_source} {self.other:,.0f}{why}"


def figure(trial: TrialRecord, study: StudyRecord | None = None) -> Figure:
    """The figure that decided `trial`'s verdict (see Figure)."""
    h = study.head_to_head if study is not None else None
    met = h is not None and trial.number in {h.leader, *(r["trial"] for r in h.ratios)}
    again = "head-to-head" if met else "confirmation"
    why = (f"{trial.confirm_state}, {trial.confirm_reason}" if trial.confirm_reason
           else trial.confirm_state)
    if trial.confirm_objective is not None and trial.confirm_meets_sla:
        return Figure(trial.confirm_objective, trial.confirmation, again, trial.objective,
                      "first run", why)
    return Figure(trial.objective, trial.measurements, "first run", trial.confirm_objective,
                  again if trial.confirm_objective is not None else None,
                  why if trial.confirm_objective is not None else None)


def counted_runs(trials: Iterable[TrialRecord]
                 ) -> list[tuple[TrialRecord, list[LevelMeasurement], bool]]:
    """The runs a choice may rest on, by `winner`'s rule: once any trial of the study is
    confirmed (`is_confirmed`), only those confirmations, each with its re-run's levels; before
    any, every complete trial's first run. As (trial, its levels, whether they are a
    confirmation's)."""
    trials = list(trials)
    confirmed = [t for t in trials if is_confirmed(t)]
    if confirmed:
        return [(t, t.confirmation, True) for t in confirmed]
    return [(t, t.measurements, False) for t in trials if t.state == "complete"]


def winner(study: StudyRecord, trials: list[TrialRecord]) -> TrialRecord:
    """The winner: the pick of the study's head-to-head (its finalists side by side) where it
    had one; else the best confirmed trial, by the objective of its confirmation, among those
    whose confirmation met the SLA; before any confirmation, the complete trial with the highest
    objective among those that met the SLA (`is_confirmed` tells which). Raises NoResult when no
    trial met the SLA."""
    h = study.head_to_head
    if h is not None:  # the finalists side by side: its pick, where that still stands
        picked = next((t for t in trials if t.number == h.pick and met_sla(t)
                       and t.confirm_meets_sla is not False), None)
        if picked is not None:
            return picked
    confirmed = [t for t in trials if is_confirmed(t)]
    if confirmed:
        return max(confirmed, key=lambda t: t.confirm_objective)
    ok = [t for t in trials if met_sla(t)]
    if not ok:
        raise NoResult(no_result_advice(study.name, trials))
    return max(ok, key=lambda t: t.objective)


def no_result_advice(name: str, trials: list[TrialRecord]) -> str:
    """Why a study has no winner, in one line, with the advice its trials' outcomes call for:
    SLA misses are a matter of the SLA; failures of the engine and the space are not."""
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state] = counts.get(t.state, 0) + 1
    seen = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials"
    ran = [t for t in trials if t.state in ("complete", "pruned")]
    failed: dict[str, int] = {}
    for t in trials:
        if t.state == "failed":
            failed[t.failure_kind or "error"] = failed.get(t.failure_kind or "error", 0) + 1
    if not trials or all(t.state == "infeasible" for t in trials):
        advice = "no configuration of the space can run here: widen the search space"
    elif not ran and failed:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(failed.items()))
        advice = (f"every trial that launched failed ({kinds}): their reasons in `tuner "
                  "status` point at the engine setup (engine.args, engine.env, the model) or "
                  "the space, not the SLA")
    else:
        advice = ("relax the spec's sla, widen the search space or run more trials; `tuner "
                  "status` lists them")
    return f"study {name} has no trial that met the SLA ({seen}): {advice}"


# ---------------------------------------------------------------- Pareto studies


def pareto_values(levels: list[LevelMeasurement], sla: SLA) -> tuple[float, float]:
    """What a Pareto study tells Optuna of a trial that ran: the most output tok/s per GPU and
    the most per-user tok/s (p90) its levels reached while meeting the SLA, each at its own load
    (the configuration's reach both ways: one configuration ahead of another on both can serve
    more users faster). A trial with no level meeting the SLA gives both at its `best_level`
    (its constraints tell Optuna it missed). (0, 0) when nothing was measured."""
    met = [m for m in levels if m.meets_sla]
    if met:
        return (max(m.output_tok_s_per_gpu for m in met),
                max(m.tok_s_per_user_p90 or 0.0 for m in met))
    level, _ = best_level(levels, sla)
    if level is None:
        return 0.0, 0.0
    return level.output_tok_s_per_gpu, level.tok_s_per_user_p90 or 0.0


Point = tuple[TrialRecord, LevelMeasurement]


def operating_points(trials: Iterable[TrialRecord]) -> list[Point]:
    """Every measured operating point a deploy could use: each level that met the SLA of each
    complete trial, as (trial, level): output tok/s per GPU at that load, and per-user p90."""
    return [(t, m) for t in trials if t.state == "complete" for m in t.measurements
            if m.meets_sla and m.tok_s_per_user_p90 is not None]


def non_dominated(pairs: Sequence[tuple[float, float]]) -> list[int]:
    """The indices of the pairs no other pair beats on both values (both maximised; of
    identical pairs, the first), in order of the first value, highest first."""
    order = sorted(range(len(pairs)), key=lambda i: (-pairs[i][0], -pairs[i][1], i))
    front: list[int] = []
    for i in order:
        if not front or pairs[i][1] > pairs[front[-1]][1]:
            front.append(i)
    return front


def pareto_front(points: list[Point]) -> list[Point]:
    """The operating points no other beats on both output tok/s per GPU and per-user p90,
    fastest per GPU first: for any per-user target, the best point to deploy is on it. The
    dashboard draws this front (`operating_points`, `non_dominated`)."""
    pairs = [(m.output_tok_s_per_gpu, m.tok_s_per_user_p90) for _, m in points]
    return [points[i] for i in non_dominated(pairs)]


def pick_for_user(study: StudyRecord, trials: list[TrialRecord], min_tok_s_per_user: float
                  ) -> Point:
    """The front's point with the most output tok/s per GPU among those whose per-user p90
    reaches `min_tok_s_per_user`: the configuration to deploy for that target, and the load
    (the level) it was measured at. Raises NoResult naming the fastest per-user speed measured
    when no point reaches it."""
    front = pareto_front(operating_points(trials))
    for trial, level in front:  # fastest per GPU first
        if level.tok_s_per_user_p90 >= min_tok_s_per_user:
            return trial, level
    if not front:
        raise NoResult(f"study {study.name} has no level that met the SLA: relax the spec's sla "
                       "or run more trials; `tuner status` lists them")
    fastest = front[-1][1].tok_s_per_user_p90
    raise NoResult(f"--min-tok-s-per-user {min_tok_s_per_user:g}: no level of study "
                   f"{study.name} reached it (the fastest per-user p90 measured is "
                   f"{fastest:,.1f} tok/s): lower the target, or search configurations for "
                   "lower latency")
