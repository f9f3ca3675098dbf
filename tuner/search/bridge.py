"""The one bridge to Optuna: its storage on the study database, the sampler, the study itself,
what the sampler is told of failures and repeats, and the heartbeats of running trials."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState
from pydantic import ValidationError

import tuner
from tuner.measure.metrics import UNUSABLE_VIOLATION
from tuner.spec.errors import BadInput
from tuner.spec.space import SearchSpace
from tuner.spec.study_spec import BudgetSpec, StudySpec
from tuner.store import Store, TrialRecord, engine_options, mask_url

if TYPE_CHECKING:  # the bridge loads no serving code: the dashboard's importance uses it
    from tuner.search.context import Say, StudyContext

# tuner asks and tells with heartbeats on, beating from its own thread (Heartbeat below):
# Optuna's warning that heartbeats are meant for `optimize`, and its experimental notices for
# the heartbeat API, would be printed at every ask.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed", module="optuna")
warnings.filterwarnings("ignore", message=r".*(heartbeat|fail_stale_trials|retried_trial_number)",
                        category=optuna.exceptions.ExperimentalWarning)
# TPE's joint modelling is marked experimental too; tuner chooses it (see make_sampler).
warnings.filterwarnings("ignore", message=r"Argument ``(multivariate|group)`` is an experimental",
                        category=optuna.exceptions.ExperimentalWarning)

# Parts of a spec that define what is measured: a resumed study must not change them.
_DEFINING = ("model", "engine", "hardware", "workload", "sla", "objective", "quality")


def optuna_storage(url: str, budget: BudgetSpec | None = None,
                   store: Store | None = None) -> optuna.storages.RDBStorage:
    """Optuna's storage on the study database; with a budget's heartbeat settings, trials of a
    worker that stops beating are failed by the others and retried once (Optuna's own
    heartbeat and retry callback: tuner adds no scheduler of its own). With the `store` of the
    same database, Optuna sets up its tables under the store's setup lock."""
    kwargs = engine_options(url)  # the store's: timeouts, pre-ping
    beats: dict[str, Any] = {}
    if budget is not None:
        beats = {"heartbeat_interval": budget.heartbeat_interval_s,
                 "grace_period": budget.heartbeat_grace_s,
                 "heartbeat_stale_trial_callback":
                     optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)}
    if store is None:
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, **beats)
    with store.setup_lock():
        return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, **beats)


def make_sampler(spec: StudySpec, seed: int | None,
                 space: SearchSpace | None = None) -> optuna.samplers.BaseSampler:
    """The spec's sampler with this seed (a worker's own, see StudyContext.sampler_seed).

    `grid` walks every point of the space's grid once, in a seeded order (Optuna's GridSampler;
    the loop launches only the feasible ones, and the points that a condition makes the same
    configuration run once)."""
    if spec.sampler.name == "grid":
        if space is None:
            raise ValueError("sampler grid needs the search space")
        grid = {name: space.values(name) for name in space.parameters}
        return _AskTellGridSampler(grid, seed=seed)
    return _model_sampler(spec, seed)


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """Optuna's GridSampler without its stop at the end of the grid: that stop is for
    `study.optimize`, and tuner asks and tells (the loop ends when nothing feasible is left)."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                    state: TrialState, values: Any) -> None:
        return None


def _model_sampler(spec: StudySpec, seed: int | None) -> optuna.samplers.BaseSampler:
    """TPE or random.

    TPE models the parameters jointly (`multivariate`, `group`: a draft length exists only with
    speculation), and from its first ask: the study loop itself hands it the startup trials, drawn
    from the configurations that can launch, so infeasible samples and repeats never count as
    startup (`sampler.n_startup_trials` counts launched trials)."""
    if spec.sampler.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=0, multivariate=True,
                                      group=True)


def _as_current(spec: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as today's StudySpec writes it: fields added since it was stored take their
    defaults, which measure what was measured before (one round, closed loop, completions), so
    resuming an older study is not refused for them. A spec that no longer validates is left
    as stored, and compares unequal."""
    try:
        return StudySpec.model_validate(spec).model_dump(mode="json")
    except ValidationError:
        return spec


# The trial's user attribute holding the floor it is pruned against (`rules.incumbent_floor`
# when it started): read once per trial, so no round of a level waits on the study's trials.
INCUMBENT_FLOOR = "incumbent_floor"


class IncumbentPruner(optuna.pruners.BasePruner):
    """Prunes a trial whose last reported figure (the upper end of a level's 95% interval of
    output tok/s per GPU, see `trial.IncumbentCheck`) is under its INCUMBENT_FLOOR."""

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step, floor = trial.last_step, trial.user_attrs.get(INCUMBENT_FLOOR)
        return step is not None and floor is not None and trial.intermediate_values[step] < floor


def load_or_create_study(ctx: StudyContext) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec_dict = ctx.spec.model_dump(mode="json")
    if spec_dict.get("storage"):  # workers are told the URL; the stored spec keeps no password
        spec_dict["storage"] = mask_url(spec_dict["storage"])
    existing = ctx.store.get_study(ctx.name)
    if existing is not None:
        stored = _as_current(existing.spec)
        changed = [k for k in _DEFINING if stored.get(k) != spec_dict.get(k)]
        if existing.space != ctx.space.model_dump(mode="json"):
            changed.append("search_space")
        if changed:
            raise BadInput(
                f"study {ctx.name} already exists with a different {', '.join(changed)}: "
                "pass --study-name NEW to start a new study, or restore the spec"
            )
    ctx.store.ensure_study(
        ctx.name, engine=ctx.spec.engine.name, model=ctx.settings.model,
        gpu_type=ctx.spec.hardware.gpu_type, spec=spec_dict,
        space=ctx.space.model_dump(mode="json"), tuner_version=tuner.__version__,
    )
    return optuna.create_study(
        study_name=ctx.name, storage=optuna_storage(ctx.storage_url, ctx.spec.budget, ctx.store),
        # Pareto: output tok/s per GPU and per-user tok/s (rules.pareto_values), both maximised.
        directions=["maximize", "maximize"] if ctx.spec.objective.pareto else ["maximize"],
        sampler=make_sampler(ctx.spec, ctx.sampler_seed, ctx.space), load_if_exists=True,
        pruner=IncumbentPruner(),
    )


def tell_measured(study: optuna.Study, trial: optuna.Trial, value: float | Sequence[float],
                  violations: dict[str, float]) -> None:
    """A trial that ran: its objective (a Pareto study's two values), and its SLA violations as
    constraints (<= 0: met), on the scale that makes Optuna rank near misses ahead of far ones
    (see `sla_violations`)."""
    _constrain(trial, violations)
    study.tell(trial, value)


def tell_pruned(study: optuna.Study, trial: optuna.Trial, violations: dict[str, float],
                reason: str) -> None:
    """A trial stopped once clearly below the incumbent: PRUNED, which TPE ranks behind every
    complete trial by its last reported figure, with its SLA violations as constraints, so a
    pruned trial that also missed the SLA ranks with the misses."""
    trial.set_user_attr("pruned_reason", reason)
    _constrain(trial, violations)
    study.tell(trial, state=TrialState.PRUNED)


def _constrain(trial: optuna.Trial, violations: dict[str, float]) -> None:
    for key, v in violations.items():
        trial.set_constraint(key, v)


def tell_unusable(study: optuna.Study, trial: optuna.Trial, constraint: str, kind: str | None,
                  reason: str | None) -> None:
    """A configuration that failed or cannot run: for the sampler, a violated constraint.

    Optuna's TPE ignores FAIL trials, so it would keep proposing a configuration that crashes;
    as an infeasible COMPLETE trial, worse than any SLA miss (UNUSABLE_VIOLATION), it lands in
    TPE's bad group behind every trial that ran, and the search steers away.
    tuner's own table keeps the true state (failed / infeasible) and the reason; FAIL in
    Optuna is kept for trials cut short by the tuner itself (not the configuration's fault).
    """
    trial.set_user_attr("failure_kind", kind)
    trial.set_user_attr("failure_reason", reason)
    trial.set_constraint(constraint, UNUSABLE_VIOLATION)
    study.tell(trial, [0.0] * len(study.directions))


def tell_retry(study: optuna.Study, trial: optuna.Trial, params: dict[str, Any],
               kind: str | None, reason: str | None) -> None:
    """A transient failure that may be the node's: nothing for the sampler to learn yet (FAIL,
    which TPE ignores), and the same configuration queued to run once more on a fresh server;
    the retry's outcome is what the sampler is told."""
    trial.set_user_attr("failure_kind", kind)
    trial.set_user_attr("failure_reason", reason)
    trial.set_user_attr("retry_pending", True)
    study.tell(trial, state=TrialState.FAIL)
    study.enqueue_trial(params)


def tell_repeat(study: optuna.Study, trial: optuna.Trial, earlier: TrialRecord) -> None:
    """A repeat of a finished configuration: tell Optuna the earlier result, launch nothing."""
    trial.set_user_attr("repeat_of", earlier.number)
    ft = next(t for t in study.get_trials(deepcopy=False) if t.number == earlier.number)
    if ft.state != TrialState.COMPLETE:
        study.tell(trial, state=TrialState.FAIL)
        return
    for k, v in ft.constraints.items():
        trial.set_constraint(k, v)
    study.tell(trial, ft.values)


class Heartbeat:
    """Records that a trial's worker is alive every heartbeat interval, from a thread of its own,
    while the trial waits for devices and runs. Optuna beats only inside `study.optimize`; tuner
    asks and tells, so it beats itself, through the storage's public heartbeat API. Without
    beats (a SIGKILLed worker), another worker fails the trial after the grace period and Optuna
    retries it once."""

    def __init__(self, storage: optuna.storages.RDBStorage, study_name: str, number: int,
                 interval_s: float, say: Say):
        self._store_beats = storage
        self._beat_id = storage.get_trial_id_from_study_id_trial_number(
            storage.get_study_id_from_name(study_name), number)
        self._interval, self._say = interval_s, say
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{number}",
                                        daemon=True)

    def _beat(self) -> None:
        warned = False
        while True:
            try:
                self._store_beats.record_heartbeat(self._beat_id)
            except Exception as e:  # a database blip: the next beat may pass; say it once
                if not warned:
                    self._say(f"  heartbeat not recorded ({type(e).__name__}); retrying")
                    warned = True
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> Heartbeat:
        self._store_beats.record_heartbeat(self._beat_id)  # beating before anything is claimed
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def sample(study_trial: optuna.Trial, space: SearchSpace) -> dict[str, Any]:
    """The configuration Optuna proposes for this trial, each active parameter in the space's
    order (define-by-run: a draft length only where speculation is on)."""
    return space.sample(study_trial.suggest_categorical)


def tell_not_run(study: optuna.Study, trial: optuna.Trial, why: str) -> None:
    """An asked trial that launched nothing and is no configuration's verdict (being measured by
    another worker, the budget spent meanwhile): FAIL, which TPE ignores, with why as an attr."""
    trial.set_user_attr(why, True)
    study.tell(trial, state=TrialState.FAIL)


def tell_cut_short(study: optuna.Study, trial: optuna.Trial, kind: str) -> None:
    """A trial the tuner itself cut short (`interrupted`, a bug's `error`): FAIL, which TPE
    ignores: there is no verdict on the configuration to learn."""
    trial.set_user_attr("failure_kind", kind)
    study.tell(trial, state=TrialState.FAIL)


def _frozen(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def retried_from(study: optuna.Study, trial: optuna.Trial) -> int | None:
    """The trial this one retries after its worker stopped beating (Optuna's heartbeat retry),
    or None."""
    return optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(
        _frozen(study, trial.number))


def still_running(study: optuna.Study, trial: optuna.Trial) -> bool:
    """Whether Optuna still holds this trial as running (another worker that missed its
    heartbeats fails it)."""
    return _frozen(study, trial.number).state == TrialState.RUNNING


def fail_interrupted(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> None:
    """A trial left running by a tuner that died: FAIL, as Optuna's own stale trial handling
    would, so the study runs another in its place (tuner's table keeps why)."""
    study.tell(frozen.number, state=TrialState.FAIL)


def sample_configs(space: SearchSpace, seed: int | None, asks: int) -> Iterator[dict[str, Any]]:
    """Up to `asks` configurations drawn at random from the space, as Optuna's sampler proposes
    them (repeats included), one at a time: what `tuner run --dry-run` plans, with no study
    stored. Lazily, since a draw costs about a millisecond and callers stop once they have
    enough (a 200-plan dry run drew its whole bound of 10,000 first: 12 s)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(asks):
        trial = study.ask()
        config = sample(trial, space)
        study.tell(trial, state=TrialState.FAIL)
        yield config


# Another worker failed this trial (it missed the heartbeats) while this one still ran it.
TellConflict = optuna.exceptions.UpdateFinishedTrialError


def queued(study: optuna.Study) -> bool:
    """Whether configurations wait in the study's queue (a warm start's, a retry)."""
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def running(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def fail_stale(study: optuna.Study) -> set[int]:
    """Fail the trials whose workers stopped beating (Optuna queues each for one retry), and
    return the numbers of every failed trial."""
    optuna.storages.fail_stale_trials(study)
    return {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}



# Optuna's storage could not answer: the CLI says so in one line.
StorageUnavailable = optuna.exceptions.StorageInternalError


def importances(configs: list[dict[str, Any]], values: list[float]) -> dict[str, float]:
    """Optuna's parameter importances over these configurations and their figures, in a study
    that lives in memory only; largest first. PED-ANOVA compares the best trials' parameter
    values with all trials'; its default best tenth is one configuration in a small study,
    whose every value then looks decisive, so the best group holds at least 3."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    dists = {k: optuna.distributions.CategoricalDistribution(
        tuple(sorted({c[k] for c in configs}, key=repr))) for k in configs[0]}
    for c, v in zip(configs, values, strict=True):
        study.add_trial(optuna.trial.create_trial(params=c, distributions=dists, value=v))
    share = min(0.5, max(0.1, 3 / len(configs)))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=share)
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator))
