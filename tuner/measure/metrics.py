"""From measured requests to the numbers a study optimizes: percentiles, throughput per GPU,
per-user decode speed, goodput under the SLA, and the objective over a trial's concurrency levels.

Pure computation over records; nothing here reads a clock or the network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tuner.measure.records import EngineGauges, RequestResult
from tuner.measure.stats import converged, mean_ci, rounds_needed, spread_of_interval
from tuner.spec.sla import SLA
from tuner.store.records import LevelMeasurement

if TYPE_CHECKING:  # the load generator's run, only read here: reports import this module alone
    from tuner.measure.loadgen import LevelRun

# Constraint values share one scale, because Optuna ranks infeasible trials by the sum of their
# positive values: a measured miss is its shortfall as a fraction of the target, squashed into
# (0, 1) with its order kept (`_miss`), so the at most three measured constraints sum below 3;
# a figure that could not be measured (no successful request) is worse than all of them
# together; a configuration that failed or cannot run is worse than any SLA miss (three
# constraints, two of them missing, sum below 1 + 2 x 4). Finite on purpose: Optuna stores
# constraints as JSON, and infinities would tie.
MISSING_VIOLATION = 4.0
UNUSABLE_VIOLATION = 10.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation, as numpy's default; None if empty."""
    return _percentile_sorted(sorted(values), q)


def _percentile_sorted(ordered: Sequence[float], q: float) -> float | None:
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not ordered:
        return None
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def decode_speed(result: RequestResult) -> float | None:
    """Tokens per second one user sees after the first token: (output - 1) / (latency - ttft).

    None when it is undefined: a failed request, or one with a single output token.
    """
    if not result.ok or result.output_tokens is None or result.output_tokens < 2:
        return None
    decode_s = result.latency_s - result.ttft_s
    if decode_s <= 0:
        return None
    return (result.output_tokens - 1) / decode_s


def meets_targets(result: RequestResult, sla: SLA) -> bool:
    """Whether one successful request meets every SLA target that is set.

    A request without a decode speed (one output token) cannot show it meets a speed target.
    """
    if not result.ok:
        return False
    if sla.ttft_p90_ms is not None and result.ttft_s * 1000 > sla.ttft_p90_ms:
        return False
    if sla.min_tok_s_per_user_p90 is not None:
        speed = decode_speed(result)
        if speed is None or speed < sla.min_tok_s_per_user_p90:
            return False
    return True


def _ms(ordered_s: list[float], q: float) -> float | None:
    value = _percentile_sorted(ordered_s, q)
    return None if value is None else value * 1000


def _rate(count: float, duration_s: float) -> float:
    return count / duration_s if duration_s > 0 else 0.0


def summarize_level(run: LevelRun, gpus: int, sla: SLA,
                    ci_target: float | None = None) -> LevelMeasurement:
    """One level's row, over its rounds (one unless the level was repeated).

    Rates (output tok/s, requests/s, goodput) are each round's count over that round's duration,
    averaged over rounds: rounds are the independent samples that the 95% confidence half-width
    of output tok/s comes from (Student t, None with one round), and the level `converged` when
    that half-width is within `ci_target` of the mean. Percentiles pool every round's successful
    requests. The TTFT and ITL means pool them too (ITL: each request's mean gap, since the gaps
    of one request share its batch), and their intervals take the rounds as samples (batch
    means): requests in flight together share batches, so they are not independent draws, while
    rounds nearly are. One round has no interval. meets_sla: no errors and the p90 figures
    within the targets. Open loop, the achieved request rate is the rate the timed requests were
    sent at (`loadgen.Arrivals.sent_rate`, averaged over rounds), beside the offered one, and
    `capped_requests` counts those that waited for a free slot under the in-flight cap.
    """
    if gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {gpus}")
    rounds = run.round_runs()
    ok = [r for r in run.results if r.ok]
    failed = [r for r in run.results if not r.ok]
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    ttft = sorted(r.ttft_s for r in ok)
    itl = sorted(gap for r in ok for gap in r.itl_s)
    e2e = sorted(r.latency_s for r in ok)
    speeds = sorted(s for s in map(decode_speed, ok) if s is not None)
    tpot = sorted(1 / s for s in speeds)
    round_tok_s = [rnd.output_tok_s for rnd in rounds]
    output_tok_s, tok_s_ci = mean_ci(round_tok_s)
    ttft_mean, ttft_ci = _batch_means(rounds, lambda r: r.ttft_s * 1000)
    itl_mean, itl_ci = _batch_means(
        rounds, lambda r: math.fsum(r.itl_s) / len(r.itl_s) * 1000 if r.itl_s else None)
    engine = run.engine if isinstance(run.engine, EngineGauges) else EngineGauges()
    measurement = LevelMeasurement(
        concurrency=run.concurrency,
        requests=len(run.results),
        errors=len(failed),
        duration_s=run.duration_s,
        input_tokens=sum(r.prompt_tokens or 0 for r in ok),
        output_tokens=output_tokens,
        request_throughput=_mean_rate(rounds, lambda rs: sum(r.ok for r in rs)),
        output_tok_s=output_tok_s or 0.0,
        output_tok_s_per_gpu=(output_tok_s or 0.0) / gpus,
        ttft_p50_ms=_ms(ttft, 50),
        ttft_p90_ms=_ms(ttft, 90),
        ttft_p99_ms=_ms(ttft, 99),
        itl_p50_ms=_ms(itl, 50),
        itl_p90_ms=_ms(itl, 90),
        itl_p99_ms=_ms(itl, 99),
        tpot_p50_ms=_ms(tpot, 50),
        tpot_p90_ms=_ms(tpot, 90),
        e2e_p50_ms=_ms(e2e, 50),
        e2e_p90_ms=_ms(e2e, 90),
        tok_s_per_user_p50=_percentile_sorted(speeds, 50),
        # The speed 90% of requests reach or beat: the 10th percentile.
        tok_s_per_user_p90=_percentile_sorted(speeds, 10),
        goodput_rps=_mean_rate(rounds, lambda rs: sum(meets_targets(r, sla) for r in rs)),
        meets_sla=False,
        error_sample=failed[0].error if failed else None,
        request_rate=run.request_rate,
        achieved_request_rate=_mean_of(rnd.sent_rate for rnd in rounds),
        capped_requests=(None if all(rnd.capped is None for rnd in rounds)
                         else sum(rnd.capped or 0 for rnd in rounds)),
        rounds=len(rounds),
        output_tok_s_ci95=tok_s_ci,
        converged=(None if len(rounds) < 2 or ci_target is None
                   else converged(round_tok_s, ci_target)),
        ttft_mean_ms=ttft_mean,
        ttft_mean_ci95_ms=ttft_ci,
        itl_mean_ms=itl_mean,
        itl_mean_ci95_ms=itl_ci,
        kv_cache_usage_max=engine.kv_cache_usage_max,
        requests_running_max=engine.requests_running_max,
        requests_waiting_max=engine.requests_waiting_max,
        preemptions=engine.preemptions,
    )
    # Defined through the constraints so the study's feasibility and meets_sla cannot disagree.
    violations = sla_violations(measurement, sla).values()
    measurement.meets_sla = bool(ok) and all(v <= 0 for v in violations)
    return measurement


def _batch_means(rounds, value) -> tuple[float | None, float | None]:
    """The mean of `value` over every successful request of every round, and the 95% half-width
    from the rounds' own means (None with fewer than two rounds that have a value)."""
    per_round = [[v for r in rnd.results if r.ok and (v := value(r)) is not None]
                 for rnd in rounds]
    pooled = [v for values in per_round for v in values]
    if not pooled:
        return None, None
    _, half = mean_ci([math.fsum(values) / len(values) for values in per_round if values])
    return math.fsum(pooled) / len(pooled), half


def _mean_of(values) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) / len(known) if known else None


def _mean_rate(rounds, count) -> float:
    return math.fsum(_rate(count(rnd.results), rnd.duration_s) for rnd in rounds) / len(rounds)


def sla_violations(level: LevelMeasurement, sla: SLA) -> dict[str, float]:
    """Constraint values for Optuna (<= 0 means satisfied): `errors` always, and one per set target,
    each relative to its target so misses of different figures compare (see MISSING_VIOLATION).

    `errors`: the failed share of requests; `ttft_p90_ms`: (p90 - target) / target;
    `tok_s_per_user_p90`: (target - measured) / target. A miss (> 0) is squashed into (0, 1);
    a figure that could not be measured counts as MISSING_VIOLATION.
    """
    violations = {"errors": _miss(level.errors / level.requests) if level.requests else 0.0}
    if sla.ttft_p90_ms is not None:
        measured = level.ttft_p90_ms
        violations["ttft_p90_ms"] = (
            MISSING_VIOLATION if measured is None
            else _miss((measured - sla.ttft_p90_ms) / sla.ttft_p90_ms))
    if sla.min_tok_s_per_user_p90 is not None:
        measured = level.tok_s_per_user_p90
        target = sla.min_tok_s_per_user_p90
        violations["tok_s_per_user_p90"] = (
            MISSING_VIOLATION if measured is None else _miss((target - measured) / target))
    return violations


def violation_score(violations: dict[str, float]) -> float:
    """How far from feasible, as Optuna ranks infeasible trials: the sum of the positive values."""
    return math.fsum(v for v in violations.values() if v > 0)


def _miss(shortfall: float) -> float:
    """A met target (<= 0) as it is; a miss squashed into (0, 1), keeping the order of misses."""
    return shortfall if shortfall <= 0 else shortfall / (1 + shortfall)


def confidence_text(m: LevelMeasurement, *, mark_unconverged: bool = True) -> str | None:
    """How far a level's throughput can be trusted: `±3.1%` (the 95% half-width as a fraction of
    the mean), followed by NOT CONVERGED when the rounds ran out before the target (unless
    `mark_unconverged` is off, for a line that says so itself); None for a single measurement."""
    if m.output_tok_s_ci95 is None or not m.output_tok_s:
        return None
    text = f"±{m.output_tok_s_ci95 / m.output_tok_s:.1%}"
    return text if m.converged is not False or not mark_unconverged else f"{text} NOT CONVERGED"


def convergence_note(m: LevelMeasurement, ci_target: float, max_rounds: int) -> str | None:
    """Why a level's throughput did not converge, in a line a user can act on; None when it did
    (or was measured once). Either its rounds were cut short (the incumbent check or the end of
    the trial stopped them) or they ran out: then the note gives how much the rounds varied
    (sd / mean, recovered from the stored interval), how long each lasted, and about how many
    rounds of that spread the target needs."""
    if m.converged is not False or not m.rounds or m.output_tok_s_ci95 is None \
            or not m.output_tok_s:
        return None
    if m.rounds < max_rounds:
        return (f"not converged: stopped after {m.rounds} of {max_rounds} rounds (cut short "
                f"before the {ci_target:.0%} target was reached)")
    spread = spread_of_interval(m.output_tok_s_ci95, m.output_tok_s, m.rounds)
    needed = rounds_needed(spread, ci_target, at_least=m.rounds + 1)
    takes = "over 10,000" if needed is None else f"about {needed}"
    return (f"not converged: its {m.rounds} rounds of {m.duration_s / m.rounds:.1f} s each "
            f"varied {spread:.1%} (sd/mean), so ±{ci_target:.0%} takes {takes} such rounds: "
            f"raise workload.max_rounds (or ci_target)")
