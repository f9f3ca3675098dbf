"""One trial's serving path, shared by trials and confirmations: the launch plan and server of a
configuration, one serving run (start, ready, sweep, verdict, stop), and the trial's record and
what Optuna is told of it."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.measure.engine_metrics import gauge_monitor, read_spec_decode
from tuner.measure.loadgen import Level, Repeats, run_sweep
from tuner.measure.metrics import (
    confidence_text,
    convergence_note,
    sla_violations,
    summarize_level,
)
from tuner.measure.prompts import (
    sweep_prompts,
)
from tuner.measure.stats import mean_ci
from tuner.search.bridge import (
    INCUMBENT_FLOOR,
    TellConflict,
    tell_cut_short,
    tell_measured,
    tell_pruned,
    tell_retry,
    tell_unusable,
)
from tuner.search.context import StudyContext, unbounded_load
from tuner.search.load_search import Bounds, most_levels, next_load, outcome
from tuner.search.quality_gate import check as quality_check
from tuner.search.quality_gate import check_line
from tuner.search.recovery import worker_id
from tuner.search.serving import Served, metrics_urls, server_for, start_recorded
from tuner.serve.cpu_layout import thread_held_to
from tuner.serve.engines import LaunchPlan
from tuner.serve.failures import read_log_tail, tail
from tuner.serve.launcher import LaunchFailure
from tuner.serve.neighbours import NeighbourWatch
from tuner.serve.start_phases import phases_line, start_phases
from tuner.spec.errors import BadInput, TrialError, error_text
from tuner.spec.space import replicas_of
from tuner.store import StoreError
from tuner.store.records import TRANSIENT_FAILURES, LevelMeasurement, QualityCheck
from tuner.verdict.rules import (
    config_key,
    incumbent_floor,
    interval,
    latency_miss,
    objective,
    pareto_values,
    settled,
)

if TYPE_CHECKING:
    import optuna


@dataclass
class TrialResult:
    number: int
    params: dict[str, Any]
    state: str  # complete | failed | infeasible | pruned
    objective: float | None = None
    meets_sla: bool | None = None
    failure_kind: str | None = None
    failure_reason: str | None = None
    measurements: list[LevelMeasurement] = field(default_factory=list)
    quality: QualityCheck | None = None



def level_line(m: LevelMeasurement) -> str:
    def f(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    verdict = "meets SLA" if m.meets_sla else "misses SLA"
    errs = f"  {m.errors} errors" if m.errors else ""
    if m.acceptance_rate is not None:
        verdict += (f"  drafts accepted {m.acceptance_rate:.0%} "
                    f"(length {m.acceptance_length:.2f})")
    where = f"c={m.concurrency:<4}" if m.request_rate is None else f"{m.request_rate:g} req/s"
    if m.achieved_request_rate is not None:
        where += f" (sent {m.achieved_request_rate:.3g}/s)"
    if m.requests_waiting_max:
        errs += (f"  up to {m.requests_waiting_max:.0f} requests waited for a batch slot "
                 "(their TTFT includes the queue)")
    if m.cap_engaged:
        errs += (f"  cap engaged: {m.capped_requests} of {m.requests} waited for one of "
                 f"{m.concurrency} slots (the offered rate was not delivered)")
    ci = confidence_text(m, mark_unconverged=False)  # the rounds' note says NOT CONVERGED
    ci = f" {ci}" if ci else ""
    rounds = "" if not m.rounds or m.rounds < 2 else (
        f"  {m.rounds} rounds" + ("" if m.converged else ", NOT CONVERGED"))
    return (f"    {where} {m.output_tok_s_per_gpu:>9,.0f} tok/s/GPU{ci}  "
            f"TTFT p90 {f(m.ttft_p90_ms, ',.0f')} ms  user p90 "
            f"{f(m.tok_s_per_user_p90, ',.0f')} tok/s  {verdict}{errs}{rounds}")


class IncumbentCheck:
    """Whether a level's rounds can stop because it is clearly below the incumbent, asked
    through Optuna's pruning interface: from the second round on, the upper end of the level's
    95% interval of output tok/s per GPU is reported (`trial.report`, one step per round) and
    `trial.should_prune` asks the study's pruner (`bridge.IncumbentPruner`) against `floor`,
    the incumbent when the trial started (recorded on the trial). Remembers the levels it cut
    short."""

    def __init__(self, trial: optuna.Trial, gpus: int, floor: float | None):
        self.trial, self.gpus, self.floor = trial, gpus, floor
        self.step, self.level = 0, 0
        self.cut: set[int] = set()
        if floor is not None:
            trial.set_user_attr(INCUMBENT_FLOOR, floor)

    def __call__(self, round_tok_s: list[float]) -> bool:
        mean, half = mean_ci(round_tok_s)
        if half is None or mean is None:
            return False
        self.trial.report((mean + half) / self.gpus, self.step)
        self.step += 1
        if self.trial.should_prune():
            self.cut.add(self.level)
            return True
        return False


@dataclass(frozen=True)
class Sweep:
    """The levels one serving run of a configuration measures: the spec's fixed list (a grid),
    or, for `concurrency: auto` / `request_rates: auto`, a load search (`search`) whose levels
    are decided as it goes. `cap` is the most requests any level has in flight: the open loop's
    cap, and the connection pool's size."""

    levels: list[Level]
    search: Bounds | None
    cap: int
    most: int | None = None  # the most requests the configuration runs at once, if known

    def history(self, levels: list[LevelMeasurement]) -> list[tuple[float, bool]]:
        """The measured levels as the search reads them: (load, met the SLA)."""
        rate = self.search is not None and self.search.kind == "rate"
        return [(m.request_rate if rate else m.concurrency, m.meets_sla) for m in levels]

    def plan(self, levels: list[LevelMeasurement]) -> list[Level] | Iterator[Level]:
        """What the load generator runs: the fixed list, or the search's next level each time
        it asks, from `levels` as measured so far (the sweep's on_level fills it)."""
        if self.search is None:
            return self.levels
        return self._searched(levels)

    def _searched(self, levels: list[LevelMeasurement]) -> Iterator[Level]:
        while (load := next_load(self.history(levels), self.search)) is not None:
            yield (int(load), None) if self.search.kind == "concurrency" else (self.cap, load)

    def outcome(self, levels: list[LevelMeasurement]) -> tuple[float | None, str | None]:
        """A search's highest load that met the SLA and why it ended; (None, None) for a grid."""
        if self.search is None:
            return None, None
        return outcome(self.history(levels), self.search)

    def unfinished(self, levels: list[LevelMeasurement]) -> bool:
        """Whether a search would still measure another level (it was cut short)."""
        return self.search is not None and next_load(self.history(levels), self.search) is not None


def sweep_for(ctx: StudyContext, params: dict[str, Any]) -> Sweep:
    """The sweep of a configuration under the spec's workload. A load search is bounded by
    `workload.load_search.max`, else (concurrency) by the most requests the configuration runs at
    once (`max_in_flight`: max batch size x ranks); an open loop with `concurrency: auto` is
    capped there too. Raises BadInput when that is needed and nothing gives it."""
    w = ctx.spec.workload
    most = ctx.adapter.max_in_flight(params, ctx.settings)
    most = None if most is None else most * replicas_of(params)  # each replica its own batch
    if w.concurrency != "auto":
        cap = max(w.concurrency)
    elif (why := unbounded_load(ctx.spec, ctx.adapter, ctx.settings, params)) is not None:
        raise BadInput(why)  # prepare's check_load_bounds says so before any trial
    else:
        cap = int(w.search.max) if most is None else most
    if not w.auto:
        rates = w.request_rates if w.arrival == "poisson" else None
        levels = ([(cap, r) for r in rates] if rates is not None
                  else [(c, None) for c in w.concurrency])
        return Sweep(levels, None, cap, most)
    s = w.search
    if w.arrival == "poisson":
        bounds = Bounds("rate", s.start, s.max, s.resolution,
                        "workload.load_search.max" if s.max is not None else "")
    elif s.max is not None:
        bounds = Bounds("concurrency", s.start, s.max, s.resolution, "workload.load_search.max")
        cap = int(s.max)
    else:
        bounds = Bounds("concurrency", s.start, most, s.resolution,
                        f"max batch x ranks: {most} in flight")
    return Sweep([], bounds, cap)


def skipped_levels(ctx: StudyContext, sweep: Sweep,
                   levels: list[LevelMeasurement]) -> list[dict[str, Any]]:
    """The levels of a fixed sweep after its last measured one that it does not measure, each
    with why: every one when that level missed a latency target (`rules.latency_miss`: a higher
    load cannot meet it), or, in a closed loop, every one once a measured level ran the
    configuration's full batch (concurrency at least `sweep.most`, max batch x ranks): a higher
    one adds only requests waiting for a batch slot, so the same throughput with a longer TTFT.
    None for a load search (a miss closes its bracket, and max batch x ranks bounds it)."""
    w = ctx.spec.workload
    if w.auto or not levels:
        return []
    rates = w.request_rates if w.arrival == "poisson" else None
    why = latency_miss(levels[-1], ctx.spec.sla.to_sla())
    full = None if sweep.most is None or rates else next(
        (m for m in levels if m.concurrency >= sweep.most), None)
    if why is not None:
        where = _load_text(levels[-1].concurrency, levels[-1].request_rate)
        reason = f"not measured: {where} missed its {why}, and a higher load cannot meet it"
    elif full is not None:
        reason = (f"not measured: c={full.concurrency} already ran this configuration's full "
                  f"batch (max batch x ranks: {sweep.most} in flight); more would only wait "
                  "for a batch slot")
    else:
        return []
    return [{"level": i, "concurrency": max(w.concurrency) if rates else w.concurrency[i],
             "request_rate": rates[i] if rates else None, "reason": reason}
            for i in range(len(levels), w.level_count)]


def measure(ctx: StudyContext, server: Served, plan: LaunchPlan, deadline: float,
            sweep: Sweep, cut_short: IncumbentCheck | None = None) -> list[LevelMeasurement]:
    """Run the sweep (a fixed list, or a load search) against a ready server and return one row
    per level measured.

    Each level: warm-up, then rounds until output tok/s is known within workload.ci_target (or
    max_rounds, or `cut_short` says the level is clearly below the incumbent), with the
    engine's scheduler gauges sampled in the background and its speculative-decoding counters
    read before and after. Ends early, with the levels so far, when a level missed a latency
    target (higher loads cannot meet it: `skipped_levels`), the server dies or stops serving
    (every request of a level failed: an engine whose core died can keep its HTTP front end
    up), the deadline passes or the study is stopping.
    """
    w = ctx.spec.workload
    count = None if sweep.search is None else w.prompts_needed(most_levels(sweep.search),
                                                               sweep.cap)
    prompts = sweep_prompts(w, Path(ctx.settings.model), ctx.shape.vocab_size, count)
    sla = ctx.spec.sla.to_sla()
    levels: list[LevelMeasurement] = []
    urls = metrics_urls(plan)
    counts = [read_spec_decode(plan.engine, urls)]

    def on_level(run) -> None:
        m = summarize_level(run, plan.gpus, sla, ci_target=w.ci_target)
        counts.append(read_spec_decode(plan.engine, urls))
        if counts[-1] is not None and counts[-2] is not None:
            d = counts[-1] - counts[-2]
            if d.draft_tokens:
                m = replace(m, spec_drafts=d.drafts, spec_draft_tokens=d.draft_tokens,
                            spec_accepted_tokens=d.accepted_tokens)
        levels.append(m)
        pruned = cut_short is not None and len(levels) - 1 in cut_short.cut
        if pruned:
            ctx.say(f"      rounds stopped after {m.rounds}: clearly below the incumbent")
        if cut_short is not None:
            cut_short.level = len(levels)
        ctx.say(level_line(m))
        note = None if pruned else convergence_note(m, w.ci_target, w.max_rounds)
        if note:
            ctx.say(f"      {note}")

    def stop() -> bool:
        last = levels[-1] if levels else None
        not_serving = last is not None and last.requests > 0 and last.errors == last.requests
        return (not_serving or bool(skipped_levels(ctx, sweep, levels)) or not server.alive()
                or time.monotonic() > deadline or ctx.stop.is_set())

    with thread_held_to(None if server.layout is None else server.layout.client):
        run_sweep(
            plan.base_url, plan.model, prompts, [sweep.cap], w.requests_per_level, w.output_len,
            w.warmup_requests, w.request_timeout_s, on_level=on_level, stop=stop, api=w.api,
            repeats=Repeats(w.max_rounds, w.ci_target, cut_short), seed=w.seed,
            monitor=gauge_monitor(plan.engine, urls), plan=sweep.plan(levels),
        )
    skipped = skipped_levels(ctx, sweep, levels)
    if skipped:
        loads = ", ".join(_load_text(s["concurrency"], s["request_rate"]) for s in skipped)
        ctx.say(f"    {loads} {skipped[0]['reason']}")
    # A level where every request failed is a dead server, not a load that missed the SLA.
    served = bool(levels) and levels[-1].errors < levels[-1].requests
    if sweep.search is not None and served and not sweep.unfinished(levels):
        ctx.say(f"  load search: {sweep.outcome(levels)[1]}")
    return levels


def _check_stop(ctx: StudyContext) -> None:
    if ctx.stop.is_set():
        raise KeyboardInterrupt  # recorded as interrupted by run_trial, like Ctrl-C


def run_trial(ctx: StudyContext, study: optuna.Study, trial: optuna.Trial,
              params: dict[str, Any], devices: list[int] | None = None) -> TrialResult:
    devices = list(devices if devices is not None else ctx.inventory.devices)
    sweep = sweep_for(ctx, params)
    plan, server = server_for(ctx, params, devices, f"trial-{trial.number:04d}")
    trial.set_user_attr("worker_host", ctx.inventory.host)
    trial.set_user_attr("worker", worker_id())
    trial.set_user_attr("devices", devices[: plan.gpus])
    trial_id = ctx.store.start_trial(
        ctx.name, trial.number, params, worker_host=ctx.inventory.host, worker_pid=os.getpid(),
        launch_plan=plan.to_dict(), gpus=plan.gpus, hardware=ctx.inventory.to_dict(),
        log_path=str(server.log_path), budget=ctx.run.budget,
    )
    result = TrialResult(trial.number, params, "failed")
    levels: list[LevelMeasurement] = []
    skipped: list[dict[str, Any]] = []
    engine_version = log_tail = None
    # Optuna prunes single-objective studies only: a Pareto study has no one incumbent.
    check = None if ctx.spec.objective.pareto else IncumbentCheck(
        trial, plan.gpus, incumbent_floor(ctx.store.trials(ctx.name), ctx.spec.sla.to_sla()))
    try:
        engine_version = serve_and_measure(ctx, server, plan, trial_id, levels, check,
                                           sweep=sweep, gate=_gate(ctx, params, result))
        skipped = skipped_levels(ctx, sweep, levels)
        sla = ctx.spec.sla.to_sla()
        value, best, meets = objective(levels, sla)
        result.state, result.objective, result.meets_sla = "complete", value, meets
        violations = sla_violations(best, sla)
        if check is not None and levels.index(best) in check.cut:
            result.state, result.failure_reason = "pruned", _pruned_reason(best, check.floor)
            ctx.say(f"  pruned: {result.failure_reason}")
        trial.set_user_attr("best_concurrency", best.concurrency)
        trial.set_user_attr("meets_sla", meets)
        if result.quality is not None and not result.quality.passed:
            # Fast but wrong: its figures are kept, and it is told to the sampler as a failure.
            result.state, result.failure_kind = "failed", "quality"
            result.failure_reason = result.quality.reason
            ctx.say(f"  failed (quality): {result.failure_reason}")
    except LaunchFailure as f:
        result.failure_kind, result.failure_reason = f.kind, f.reason
        ctx.say(f"  failed ({f.kind}): {f.reason}")
        log_tail = f.log_tail
    except (KeyboardInterrupt, SystemExit, StoreError, TellConflict):
        # Ctrl-C, SIGTERM, the stop event, or another worker that took this one for dead:
        # record (the server is already stopped), propagate.
        ctx.store.finish_trial(trial_id, state="failed", failure_kind="interrupted",
                               failure_reason="interrupted: the tuner was stopped",
                               log_tail=read_log_tail(str(server.log_path)), measurements=levels)
        tell_cut_short(study, trial, "interrupted")
        raise
    except Exception as e:  # a bug, not the configuration's verdict: record it, stop the study
        ctx.store.finish_trial(trial_id, state="failed", failure_kind="error",
                               failure_reason=error_text(e), log_tail=traceback.format_exc(),
                               measurements=levels)
        tell_cut_short(study, trial, "error")
        raise TrialError(trial.number, e) from e
    result.measurements = levels
    if log_tail is None:
        # Every trial keeps its log's tail in the database, complete ones too: a copied database
        # (how a study is shared) keeps what the server said.
        log_tail = read_log_tail(str(server.log_path))
    # A failed trial's search says nothing of its load: its failure is the reason kept.
    load_at_sla, searched = (None, None) if result.state == "failed" else sweep.outcome(levels)
    ctx.store.finish_trial(
        trial_id, state=result.state, objective=result.objective, meets_sla=result.meets_sla,
        failure_kind=result.failure_kind, failure_reason=result.failure_reason,
        log_tail=log_tail, engine_version=engine_version, measurements=levels,
        skipped_levels=skipped, load_at_sla=load_at_sla, load_search=searched,
        quality=result.quality,
    )
    if result.state == "complete":
        tell_measured(study, trial, pareto_values(levels, sla) if ctx.spec.objective.pareto
                      else result.objective, violations)
    elif result.state == "pruned":
        tell_pruned(study, trial, violations, result.failure_reason)
    elif _retry_pending(ctx, params, result.failure_kind):
        tell_retry(study, trial, params, result.failure_kind, result.failure_reason)
        ctx.say(f"  {result.failure_kind} may be the node's, not the configuration's: it runs "
                "once more on a fresh server")
    else:
        tell_unusable(study, trial, "failed", result.failure_kind, result.failure_reason)
    return result


def _gate(ctx: StudyContext, params: dict[str, Any],
          result: TrialResult) -> Callable[[LaunchPlan], None] | None:
    """The quality gate on a trial's live server, its check kept on `result`; None when the
    study has no reference (the gate is off)."""
    reference = ctx.run.reference
    if reference is None:
        return None

    def run(served: LaunchPlan) -> None:
        result.quality = quality_check(ctx, served, params, reference)
        ctx.say(check_line(result.quality))

    return run


def _load_text(concurrency: int, request_rate: float | None) -> str:
    """A level's load as the lines and reasons name it: `c=N`, or `R req/s` in an open loop."""
    return f"c={concurrency}" if request_rate is None else f"{request_rate:g} req/s"


def _pruned_reason(best: LevelMeasurement, floor: float | None) -> str:
    where = _load_text(best.concurrency, best.request_rate)
    against = "" if floor is None else f", under the incumbent's {floor:,.0f}"
    return (f"clearly below the incumbent: its best level ({where}) reached at most "
            f"{interval(best)[1]:,.0f} tok/s/GPU (95% interval) in {best.rounds} rounds{against}")


def _retry_pending(ctx: StudyContext, params: dict[str, Any], kind: str | None) -> bool:
    """Whether this failure, just recorded, leaves its configuration open: a single transient
    failure gets one retry (`rules.settled`)."""
    return kind in TRANSIENT_FAILURES and config_key(params) not in settled(
        ctx.store.trials(ctx.name))


def serve_and_measure(ctx: StudyContext, server: Served, plan: LaunchPlan, trial_id: int,
                      levels: list[LevelMeasurement],
                      cut_short: IncumbentCheck | None = None, *, sweep: Sweep,
                      gate: Callable[[LaunchPlan], None] | None = None) -> str | None:
    """One serving run: start the server, wait until ready, measure `sweep` into `levels`,
    judge it, then (a trial's run that did not fail) let `gate`, the quality gate, ask the same
    live server. Returns the engine's version; raises LaunchFailure when the run failed, and lets
    an interrupt through. Whatever happens, the server is stopped and recorded as stopped.

    A trial and its confirmation in a fresh server both run through here, so they measure alike.
    """
    t0 = time.monotonic()
    deadline = t0 + ctx.spec.budget.trial_timeout_s
    try:
        watch = NeighbourWatch()  # other work on this tuner's cores, over the server's start
        start_recorded(ctx, server, trial_id)
        ready_s = server.wait_ready(min(ctx.spec.engine.ready_timeout_s, deadline - t0),
                                    tick=lambda _: _check_stop(ctx))
        engine_version = server.engine_version()
        ctx.say(f"  server ready in {ready_s:.1f} s ({plan.engine} {engine_version or '?'})")
        busy = watch.line()
        if busy:
            ctx.say(f"  {busy}")
        phases = start_phases(plan.engine, server.log_text(), server.create_time or 0.0,
                              time.time())
        if phases:
            ctx.store.record_start_phases(trial_id, server.pid, phases)
            ctx.say(f"  {phases_line(phases)}")
        if server.layout is not None:
            ctx.say(f"  {server.layout.line()}")
        levels.extend(measure(ctx, server, plan, deadline, sweep, cut_short))
        _check_stop(ctx)
        failure = _verdict(ctx, server, levels, deadline, sweep)
        if failure:
            raise failure
        if gate is not None:
            gate(plan)
            if not server.alive():
                raise server.failure()
        return engine_version
    finally:
        if server.proc is not None:
            server.stop()
            ctx.store.mark_server_stopped(trial_id)


def _verdict(ctx: StudyContext, server: Served, levels: list[LevelMeasurement],
             deadline: float, sweep: Sweep) -> LaunchFailure | None:
    """A trial whose server died, that ran out of time, or whose requests all failed, failed."""
    errors = any(m.errors for m in levels)
    if errors:
        # A crash under load shows as failed requests first; give the process a moment to exit.
        for _ in range(20):
            if not server.alive():
                break
            time.sleep(0.25)
    if not server.alive():
        return server.failure()
    dead = [m for m in levels if m.requests and m.errors == m.requests]
    if dead:  # the sweep stopped there: the server no longer served
        return server.failure("request_errors", f"every request failed at c={dead[0].concurrency}: "
                              f"{dead[0].error_sample}")
    unfinished = (sweep.unfinished(levels) if sweep.search is not None
                  else len(levels) + len(skipped_levels(ctx, sweep, levels)) < len(sweep.levels))
    if unfinished:
        if time.monotonic() > deadline:
            limit = ctx.spec.budget.trial_timeout_s
            return LaunchFailure("timeout", f"sweep not finished within {limit:.0f} s",
                                 tail(server.log_text()))
        return server.failure("request_errors", "the sweep ended early")
    return None
