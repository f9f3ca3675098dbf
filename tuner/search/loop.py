"""The study loop: ask Optuna, check feasibility, run a real serving trial, record, tell.

Budget: `n_trials` counts trials that launched a server and reached a verdict (complete or
failed). Infeasible samples and repeats of a finished configuration cost no server and do not
count; a trial cut short by an interrupted tuner does not count either (it is marked failed, and
the study runs another in its place).
"""


from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.search.bridge import (
    Heartbeat,
    TellConflict,
    load_or_create_study,
    optuna_storage,
    queued,
    retried_from,
    sample,
    still_running,
    tell_not_run,
    tell_repeat,
    tell_unusable,
)
from tuner.search.context import StudyContext
from tuner.search.lessons import lessons, ruled_out, spec_at_fault
from tuner.search.quality_gate import ensure_reference
from tuner.search.recovery import OTHER_WORKER_POLL_S, reap_stale, recover
from tuner.search.startup import spread_choice
from tuner.search.time_plan import costs, plan
from tuner.search.trial import TrialResult, run_trial
from tuner.serve.routers import world_size
from tuner.serve.slots import DevicePool
from tuner.spec.errors import BadInput
from tuner.spec.feasibility import Check
from tuner.spec.space import describe
from tuner.store import BudgetSpent, ConfigurationTaken, StoreError, TrialRecord, mask_url
from tuner.verdict.rules import config_key, settled

if TYPE_CHECKING:
    import optuna

MAX_IDLE_ASKS = 10


@dataclass(frozen=True)
class WarmStart:
    """Configurations to run before the sampler's own, chosen outside the search (by the
    performance model, `tuner.plan.planner.warm_start`), and the check that rejects before launch
    what they say cannot run. `choose` gets the keys of the configurations already finished."""

    check: Check
    choose: Callable[[set[str]], list[dict[str, Any]]]


def _finished_configs(ctx: StudyContext) -> dict[str, TrialRecord]:
    """The configurations settled by trials that count toward the budget, each with its last
    such trial (a transient failure alone leaves its configuration open for one retry)."""
    return settled(ctx.store.trials(ctx.name))


def _starting(ctx: StudyContext, study: optuna.Study, used: int) -> bool:
    """Whether TPE is still in its startup: fewer trials launched (or running) than
    `sampler.n_startup_trials`, and nothing queued already (a warm start's trials come first)."""
    if ctx.spec.sampler.name != "tpe" or used >= ctx.spec.sampler.n_startup_trials:
        return False
    return not queued(study)


@contextmanager
def stop_signals_as_interrupt(stop: threading.Event):
    """SIGTERM ends a study like Ctrl-C does, so servers are stopped and trials recorded. Both
    also set `stop` (the study's `ctx.stop`): a KeyboardInterrupt raised while Python runs a
    callback whose exceptions it ignores (logging's fork hook, as a server is spawned, say) is
    lost, and the trial's wait loops, which check `stop`, raise it again."""
    def handler(signum, frame):
        stop.set()
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


def run_study(ctx: StudyContext, n_trials: int, warm_start: WarmStart | None = None, *,
              ends: float | None = None, finalists: int = 0) -> list[TrialResult]:
    """Run the study until `n_trials` count toward its budget. Several processes (`tuner
    worker`, on several nodes) may run one study at once: the budget is claimed atomically in
    the store, and each worker skips what another has finished or is running.

    With a time limit (`ends`, a `time.monotonic()`; else `budget.timeout_min` from now), no
    trial starts that the plan (`tuner.search.time_plan`) says would not end, with a
    head-to-head of `finalists` after it, in time."""
    study = load_or_create_study(ctx)
    ctx.run.run_to(n_trials)
    recover(ctx, study)
    reap_stale(ctx, study)
    done = _finished_configs(ctx)
    if warm_start is not None:
        queue_warm_start(ctx, study, warm_start, set(done))
    # Keyed once: the loop asks "what is left?" before every trial.
    feasible = {config_key(c): c for c in ctx.space.enumerate() if ctx.infeasible(c) is None}
    running = len(ctx.store.running_trials(ctx.name))  # by other workers
    elsewhere = f" ({running} running elsewhere)" if running else ""
    ctx.say(f"study {ctx.name}: space {ctx.space.name} has {ctx.space.size()} configurations, "
            f"{len(feasible)} feasible on {ctx.inventory.description}; "
            f"{ctx.store.budget_used(ctx.name) - running} of {n_trials} trials done{elsewhere}; "
            f"storage {mask_url(ctx.storage_url)}")
    results: list[TrialResult] = []
    timeout = ctx.spec.budget.timeout_min
    if ends is None and timeout:
        ends = time.monotonic() + timeout * 60
    launched: set[int] = set()  # the trials this run started: what they cost plans the rest
    planned = None  # how many trials the plan last said fit
    infeasible_seen: set[str] = set()  # recorded as infeasible, or as skipped (lessons)
    told_lessons: set[int] = set()  # the failed trials whose lesson was said
    idle = 0  # asks in a row that launched nothing
    rng = random.Random(ctx.sampler_seed)
    poll_s = min(ctx.spec.budget.heartbeat_interval_s, OTHER_WORKER_POLL_S)

    def record(key: str, result: TrialResult) -> None:
        results.append(result)
        finished = _finished_configs(ctx)  # a first transient failure leaves its key open
        if key in finished:
            done[key] = finished[key]
        if result.state == "complete":
            verdict = "meets SLA" if result.meets_sla else "misses SLA"
            ctx.say(f"  -> trial {result.number}: {result.objective:,.0f} tok/s/GPU, {verdict}")
        elif result.state == "pruned":
            ctx.say(f"  -> trial {result.number}: pruned at {result.objective:,.0f} tok/s/GPU")
        fault = spec_at_fault(result.failure_kind, result.failure_reason, ctx.spec.engine.args)
        if fault is not None:
            raise BadInput(f"engine.args: the engine rejected {fault!r} (trial {result.number}: "
                           f"{result.failure_reason}): fix or remove it; the study stops, as "
                           "every trial would fail alike")

    with stop_signals_as_interrupt(ctx.stop), TrialRunner(ctx, study) as runner:
        while True:
            for key, result in runner.collect():
                record(key, result)
            reap_stale(ctx, study)
            # Fresh from the store: other workers finish and start trials too.
            trials = ctx.store.trials(ctx.name)
            done.update(settled(trials))
            elsewhere = {config_key(t.params) for t in ctx.store.running_trials(ctx.name)}
            running = runner.keys | elsewhere
            used = max(ctx.store.budget_used(ctx.name), len(done) + runner.in_flight)
            taught = (lessons(trials, ctx.adapter.name)
                      if ctx.spec.budget.learn_from_failures else [])
            for lesson in taught:
                if lesson.trial not in told_lessons:
                    told_lessons.add(lesson.trial)
                    ruled = sum(lesson.matches(c) for k, c in feasible.items() if k not in done)
                    ctx.say(f"  lesson from trial {lesson.trial}: "
                            f"{lesson.text().split('): ', 1)[1]} fails alike; {ruled} "
                            "configuration(s) of the space skipped from now on")
            # What a failure's lesson rules out is not handed to the sampler; proposed by it, it
            # is recorded as skipped without a server.
            untried = [c for k, c in feasible.items() if k not in done and k not in running
                       and ruled_out(c, taught) is None]
            if used >= n_trials or not untried:
                if runner.in_flight:
                    runner.wait_one()
                    continue
                if elsewhere:
                    # Another worker's trial may yet die: then its retry is ours to run.
                    ctx.stop.wait(poll_s)
                    continue
                if used < n_trials:
                    ctx.say("every feasible configuration of the space has been tried")
                break
            if ends is not None:
                cost = costs([t for t in trials if t.number in launched])
                fits = (None if cost is None else
                        plan(cost, ends - time.monotonic(), finalists, timeout or 0,
                             n_trials - used))
                if fits is not None and used + fits.more != planned:
                    planned = used + fits.more
                    ctx.say(fits.line(used))
                if (fits.more == 0) if fits is not None else time.monotonic() > ends:
                    ctx.say(f"budget.timeout_min ({timeout or 0:g} min): no new trial started, "
                            + ("the rest of the time is the head-to-head's" if finalists >= 2
                               and fits is not None else "the time is up"))
                    runner.wait_all()
                    for key, result in runner.collect():
                        record(key, result)
                    break
            if _starting(ctx, study, used):
                # Startup: spread over the parameters' values, whatever the figures so far.
                measured = [t.params for t in trials if t.state in ("complete", "pruned")]
                study.enqueue_trial(spread_choice(
                    untried, measured + [t.params for t in ctx.store.running_trials(ctx.name)],
                    rng))
                idle = 0
            elif idle >= MAX_IDLE_ASKS:
                # A sampler that keeps proposing what is known: hand it an untried
                # configuration that can launch.
                study.enqueue_trial(rng.choice(untried))
                idle = 0
            if ctx.run.reference is None and ctx.spec.quality.enabled:
                # Before this run's first trial, while its devices are all free.
                ctx.run.keep_reference(ensure_reference(ctx))
            trial = study.ask()
            params = sample(trial, ctx.space)
            key = config_key(params)
            if key in done:
                tell_repeat(study, trial, done[key])
                idle += 1
                continue
            if key in running:  # being measured right now: nothing to learn yet
                tell_not_run(study, trial, "repeat_of_running")
                idle += 1
                continue
            reason = ctx.infeasible(params)
            lesson = None if reason else ruled_out(params, taught)
            if lesson is not None:  # a failure's cause already ruled it out: no server
                reason = lesson.text()
            if reason:
                tell_unusable(study, trial, "infeasible", "infeasible", reason)
                idle += 1
                if key not in infeasible_seen:
                    infeasible_seen.add(key)
                    ctx.store.record_infeasible(ctx.name, trial.number, params, reason)
                    shown = reason if lesson is not None else f"infeasible: {reason}"
                    ctx.say(f"trial {trial.number}  {describe(params)}\n  {shown}")
                    results.append(TrialResult(trial.number, params, "infeasible",
                                               failure_kind="infeasible", failure_reason=reason))
                continue
            idle = 0
            retry = retried_from(study, trial)
            again = f", retry of trial {retry}" if retry is not None else ""
            ctx.say(f"trial {trial.number}  {describe(params)}  ({used + 1}/{n_trials}{again})")
            launched.add(trial.number)
            runner.submit(trial, params, key)
        for key, result in runner.collect():
            record(key, result)
    return results


class TrialRunner:
    """Runs trials one after another, or (budget.parallel_trials > 1) several at once, each on
    its own devices. Results are collected by the study loop's thread, so its bookkeeping stays
    single-threaded; Optuna's ask/tell on RDB storage is safe across threads."""

    def __init__(self, ctx: StudyContext, study: optuna.Study):
        self.ctx, self.study = ctx, study
        parallel = ctx.spec.budget.parallel_trials
        self.pool = DevicePool(ctx.inventory.devices)
        self.executor = (ThreadPoolExecutor(parallel, thread_name_prefix="trial")
                         if parallel > 1 else None)
        self._running: dict[Future, str] = {}
        self._beats: optuna.storages.RDBStorage | None = None
        self._finished: list[tuple[str, TrialResult]] = []

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def keys(self) -> set[str]:
        return set(self._running.values())

    def _heartbeat(self, trial: optuna.Trial) -> Heartbeat:
        if self._beats is None:  # its own connections: beats go on while a trial runs
            self._beats = optuna_storage(self.ctx.storage_url, self.ctx.spec.budget)
        return Heartbeat(self._beats, self.study.study_name, trial.number,
                         self.ctx.spec.budget.heartbeat_interval_s,
                         self.ctx.say)

    def submit(self, trial: optuna.Trial, params: dict[str, Any], key: str) -> None:
        if self.executor is None:
            with self._heartbeat(trial):
                result = self._claimed(trial, params, None)
            if result is not None:
                self._finished.append((key, result))
            return
        beat = self._heartbeat(trial).__enter__()
        try:
            block = self.pool.acquire(
                self.ctx.inventory.slot_for(world_size(self.ctx.adapter, params)), self.ctx.stop)
        except BaseException:
            beat.__exit__(None, None, None)
            raise
        if block is None:
            beat.__exit__(None, None, None)
            raise KeyboardInterrupt
        self.ctx.say(f"  trial {trial.number} on devices {block}")
        self._running[self.executor.submit(self._run, trial, params, block, beat)] = key

    def _claimed(self, trial: optuna.Trial, params: dict[str, Any],
                 block: list[int] | None) -> TrialResult | None:
        """run_trial, or None where the store refused the claim: the budget was spent, or the
        configuration taken, by other workers since this one asked (the asked trial is told
        FAIL, not counted)."""
        try:
            return run_trial(self.ctx, self.study, trial, params, block)
        except BudgetSpent:
            tell_not_run(self.study, trial, "budget_spent")
            self.ctx.say(f"  trial {trial.number} not started: the study's budget is spent")
            return None
        except ConfigurationTaken as e:
            tell_not_run(self.study, trial, "repeat_of_running")
            self.ctx.say(f"  trial {trial.number} not started: {e}")
            return None
        except (StoreError, TellConflict):
            # Another worker took this trial for dead (its heartbeats came too late) and failed
            # it; the retry it queued measures the configuration again. The server is stopped.
            if still_running(self.study, trial):
                raise
            self.ctx.say(f"  trial {trial.number} was failed by another worker that missed its "
                         "heartbeats: its result is dropped, the retry measures it again")
            return None

    def _run(self, trial: optuna.Trial, params: dict[str, Any], block: list[int],
             beat: Heartbeat) -> TrialResult | None:
        try:
            return self._claimed(trial, params, block)
        finally:
            beat.__exit__(None, None, None)
            self.pool.release(block)

    def collect(self) -> list[tuple[str, TrialResult]]:
        out, self._finished = self._finished, []
        for fut in [f for f in self._running if f.done()]:
            key = self._running.pop(fut)
            result = fut.result()  # a trial's interrupt re-raises here
            if result is not None:
                out.append((key, result))
        return out

    def wait_one(self) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        if self._running:
            wait(list(self._running), return_when=FIRST_COMPLETED)

    def wait_all(self) -> None:
        from concurrent.futures import wait

        wait(list(self._running))

    def __enter__(self) -> TrialRunner:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.ctx.stop.set()  # every running trial stops its server and records itself
        if self.executor is not None:
            self.executor.shutdown(wait=True)


def queue_warm_start(ctx: StudyContext, study: optuna.Study, warm_start: WarmStart,
                      done: set[str]) -> None:
    """The warm start's configurations become the next trials; what its check says cannot run is
    rejected before launch like any infeasible sample."""
    ctx.run.add_check(warm_start.check)
    queued = warm_start.choose(done)
    for config in queued:
        study.enqueue_trial(config, skip_if_exists=True)
    ctx.say(f"warm start: the performance model queued {len(queued)} configuration(s) first"
            + "".join(f"\n  {describe(c)}" for c in queued))
