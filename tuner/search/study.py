"""The study loop: ask Optuna, check feasibility, run a real serving trial, record, tell.

Budget: `n_trials` counts trials that launched a server and reached a verdict (complete or
failed). Infeasible samples and repeats of a finished configuration cost no server and do not
count; a trial cut short by an interrupted tuner does not count either (it is marked failed, and
the study runs another in its place).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.trial import TrialState
from pydantic import ValidationError

import tuner
from tuner.measure.engine_metrics import gauge_monitor, read_spec_decode
from tuner.measure.loadgen import Prompt, Repeats, run_sweep
from tuner.measure.metrics import sla_violations, summarize_level
from tuner.measure.prompt_file import PromptFileError, read_prompt_file
from tuner.measure.prompts import (
    as_text,
    corpus_text_prompts,
    corpus_token_prompts,
    file_prompts,
    longest,
    spread_prompts,
    synthetic_token_prompts,
)
from tuner.search.rules import objective
from tuner.serve.engines import EngineAdapter, EngineSettings, LaunchPlan, get_adapter
from tuner.serve.failures import tail
from tuner.serve.hardware import Inventory, detect, owned_devices
from tuner.serve.launcher import LaunchFailure, ServerProcess, free_port, port_is_free, stop_group
from tuner.serve.slots import DevicePool
from tuner.spec.errors import BadInput
from tuner.spec.gpu_types import GpuType, gpu_type
from tuner.spec.space import (
    Check,
    ModelShape,
    SearchSpace,
    describe,
    infeasibility,
    load_space,
    read_model_shape,
    shape_by_name,
)
from tuner.spec.study_spec import DEFAULT_STORAGE, BudgetSpec, StudySpec, resolve_space_path
from tuner.store import BudgetSpent, ServerRecord, Store, StoreError, TrialRecord, mask_url
from tuner.store.records import LevelMeasurement

# tuner asks and tells with heartbeats on, beating from its own thread (Heartbeat below):
# Optuna's warning that heartbeats are meant for `optimize`, and its experimental notices for
# the heartbeat API, would be printed at every ask.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed", module="optuna")
warnings.filterwarnings("ignore", message=r".*(heartbeat|fail_stale_trials|retried_trial_number)",
                        category=optuna.exceptions.ExperimentalWarning)

HOST = "127.0.0.1"
MAX_IDLE_ASKS = 10
# Parts of a spec that define what is measured: a resumed study must not change them.
_DEFINING = ("model", "engine", "hardware", "workload", "sla", "objective")
Say = Callable[[str], None]


@dataclass
class TrialResult:
    number: int
    params: dict[str, Any]
    state: str  # complete | failed | infeasible
    objective: float | None = None
    meets_sla: bool | None = None
    failure_kind: str | None = None
    failure_reason: str | None = None
    measurements: list[LevelMeasurement] = field(default_factory=list)


@dataclass
class StudyContext:
    spec: StudySpec
    name: str
    space: SearchSpace
    adapter: EngineAdapter
    inventory: Inventory
    shape: ModelShape
    settings: EngineSettings
    store: Store
    storage_url: str
    runs_dir: Path
    say: Say
    gpu: GpuType
    stop: threading.Event = field(default_factory=threading.Event)  # set: end every trial
    # Further feasibility checks after the engine rules (a warm start adds the model's memory fit).
    checks: list[Check] = field(default_factory=list)
    # The study's trial budget while a loop runs it: claims beyond it are refused by the store.
    budget: int | None = None

    def infeasible(self, config: dict[str, Any]) -> str | None:
        return infeasibility(config, shape=self.shape, devices=len(self.inventory.devices),
                             adapter=self.adapter, gpu=self.gpu, settings=self.settings,
                             checks=self.checks)


# ---------------------------------------------------------------- preparing (no side effects)


def resolve_executable(executable: str) -> str:
    """The engine command: an explicit path, the one beside this Python (same venv), or PATH."""
    if os.sep in executable:
        if os.access(executable, os.X_OK):
            return str(Path(executable).resolve())
    else:
        beside = Path(sys.executable).parent / executable
        if os.access(beside, os.X_OK):
            return str(beside)
        found = shutil.which(executable)
        if found:
            return found
    raise BadInput(
        f"engine.executable {executable!r} was not found (beside {sys.executable} or on PATH): "
        "install the engine (`make install` installs vLLM's CPU build) or set engine.executable"
    )


def check_space(spec: StudySpec, space: SearchSpace, adapter: EngineAdapter) -> None:
    if space.engine != spec.engine.name:
        raise BadInput(
            f"search_space {space.name} is for engine {space.engine}, the spec's engine.name is "
            f"{spec.engine.name}: use a space of that engine"
        )
    unsupported = set(space.parameters) - adapter.supported_parameters
    if unsupported:
        raise BadInput(
            f"search_space {space.name}: {adapter.name} cannot express {sorted(unsupported)}"
        )


def check_prompt_file(spec: StudySpec) -> None:
    """A bad prompt file fails before anything starts, naming its line (the tokenizer's pick
    comes later, once the model is there)."""
    if spec.workload.prompt_source == "file":
        try:
            read_prompt_file(Path(spec.workload.prompt_file))
        except PromptFileError as e:
            raise BadInput(str(e)) from e


def ensure_model(spec: StudySpec, say: Say) -> Path:
    path = Path(spec.model.path).expanduser()
    if not path.exists():
        if spec.model.generate is None:
            raise BadInput(
                f"model.path {spec.model.path} does not exist: create it with "
                f"`tuner model tiny --out {spec.model.path}` or add `generate: tiny-gpt-oss`"
            )
        from tuner.serve.tiny_model import GENERATORS

        say(f"generating the {spec.model.generate} model at {path} (seed {spec.model.seed})")
        GENERATORS[spec.model.generate](path, seed=spec.model.seed)
    return path.resolve()


def open_store(url: str, *, create: bool = True) -> Store:
    try:
        return Store.open(url, create=create)
    except StoreError as e:
        raise BadInput(str(e)) from e


def prepare(
    spec: StudySpec, spec_path: Path, *, storage_url: str | None, study_name: str | None, say: Say
) -> StudyContext:
    """Validate everything a study needs, in an order that touches nothing until it all holds."""
    gpu = gpu_type(spec.hardware.gpu_type)
    space = load_space(resolve_space_path(spec, spec_path), spec.engine.name, gpu)
    return _context(spec, space, url=storage_url or spec.storage or DEFAULT_STORAGE,
                    name=study_name or spec.name, say=say)


def prepare_worker(storage_url: str, study_name: str | None, *, say: Say,
                   devices: list[int] | None = None) -> StudyContext:
    """A worker's context, rebuilt from what the store holds of an existing study (its spec and
    resolved search space), so every worker of a study runs exactly the same study."""
    from pydantic import ValidationError

    from tuner.spec.space import SearchSpace

    store = open_store(storage_url, create=False)
    studies = store.list_studies()
    if study_name is None:
        if len(studies) != 1:
            names = ", ".join(s.name for s in studies) or "none"
            raise BadInput(f"name the study to join with --study (studies: {names})")
        study_name = studies[0].name
    record = store.get_study(study_name)
    if record is None:
        names = ", ".join(s.name for s in studies) or "none"
        raise BadInput(f"--study {study_name}: no such study in {mask_url(storage_url)} "
                       f"(studies: {names}); create it with `tuner run STUDY.yaml --create-only`")
    try:
        spec = StudySpec.model_validate(record.spec)
        space = SearchSpace.model_validate(record.space)
    except ValidationError as e:
        first = e.errors()[0]["msg"]
        raise BadInput(f"study {study_name} was stored by another tuner version "
                       f"({record.tuner_version}) and cannot be read: {first}") from e
    return _context(spec, space, url=storage_url, name=study_name, say=say, store=store,
                    devices=devices)


def _context(spec: StudySpec, space: SearchSpace, *, url: str, name: str, say: Say,
             store: Store | None = None, devices: list[int] | None = None) -> StudyContext:
    gpu = gpu_type(spec.hardware.gpu_type)
    adapter = get_adapter(spec.engine.name)
    check_space(spec, space, adapter)
    check_prompt_file(spec)
    inventory = _inventory(spec, devices)
    executable = resolve_executable(spec.engine.executable or adapter.default_executable)
    if spec.engine.port is not None and spec.budget.parallel_trials > 1:
        raise BadInput("engine.port is fixed but budget.parallel_trials > 1: concurrent servers "
                       "need their own ports; leave engine.port out")
    if spec.engine.port is not None and not port_is_free(HOST, spec.engine.port):
        raise BadInput(
            f"engine.port {spec.engine.port} is in use: stop what holds it or leave engine.port "
            "out to use a free port"
        )
    store = store or open_store(url)
    model_dir = ensure_model(spec, say)
    shape = model_shape(spec, model_dir)
    settings = engine_settings(spec, executable, str(model_dir))
    return StudyContext(
        spec=spec, name=name, space=space, adapter=adapter, inventory=inventory, shape=shape,
        settings=settings, store=store, storage_url=url, runs_dir=Path(spec.runs_dir) / name,
        say=say, gpu=gpu,
    )


def _inventory(spec: StudySpec, devices: list[int] | None) -> Inventory:
    """The node's devices of the spec's type; with `devices`, only those (a worker's own)."""
    if devices is None:
        return detect(spec.hardware.gpu_type, spec.hardware.devices)
    inventory = owned_devices(detect(spec.hardware.gpu_type, None), devices)
    n = spec.hardware.devices
    if n is not None:
        if n > len(inventory.devices):
            raise BadInput(f"hardware.devices {n}: this worker owns only "
                           f"{len(inventory.devices)} (--devices); give it more")
        inventory = replace(inventory, devices=inventory.devices[:n])
    return inventory


def engine_settings(spec: StudySpec, executable: str, model: str) -> EngineSettings:
    container = spec.engine.container.model_dump() if spec.engine.container else None
    return EngineSettings(executable=executable, model=model, args=dict(spec.engine.args),
                          env=dict(spec.engine.env), draft_model=spec.engine.draft_model,
                          container=container)


def model_shape(spec: StudySpec, model_dir: Path | None) -> ModelShape:
    """From the checkpoint's config.json when it is here, else from the named known shape."""
    if model_dir is not None and (model_dir / "config.json").exists():
        return read_model_shape(model_dir)
    if spec.model.shape:
        return shape_by_name(spec.model.shape)
    return read_model_shape(model_dir or Path(spec.model.path))


# ---------------------------------------------------------------- Optuna plumbing


def optuna_storage(url: str, budget: BudgetSpec | None = None,
                   store: Store | None = None) -> optuna.storages.RDBStorage:
    """Optuna's storage on the study database; with a budget's heartbeat settings, trials of a
    worker that stops beating are failed by the others and retried once (Optuna's own
    heartbeat and retry callback: tuner adds no scheduler of its own). With the `store` of the
    same database, Optuna sets up its tables under the store's setup lock."""
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_pre_ping"] = True  # long trials outlive idle server connections
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


def make_sampler(spec: StudySpec) -> optuna.samplers.BaseSampler:
    s = spec.sampler
    if s.name == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    return optuna.samplers.TPESampler(seed=s.seed, n_startup_trials=s.n_startup_trials)


def _as_current(spec: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as today's StudySpec writes it: fields added since it was stored take their
    defaults, which measure what was measured before (one round, closed loop, completions), so
    resuming an older study is not refused for them. A spec that no longer validates is left
    as stored, and compares unequal."""
    try:
        return StudySpec.model_validate(spec).model_dump(mode="json")
    except ValidationError:
        return spec


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
        direction="maximize",
        sampler=make_sampler(ctx.spec), load_if_exists=True,
    )


# ---------------------------------------------------------------- recovery after a crash


def _worker_id() -> str:
    me = psutil.Process()
    return f"{me.pid}:{me.create_time():.3f}"


def _worker_alive(worker: str | None) -> bool:
    try:
        pid, created = worker.split(":") if worker else ("", "")
        return abs(psutil.Process(int(pid)).create_time() - float(created)) < 0.01
    except (ValueError, psutil.Error):
        return False


def recover(ctx: StudyContext, study: optuna.Study) -> None:
    """Reap servers left by a dead tuner on this host; mark its unfinished trials failed."""
    host = ctx.inventory.host
    for server in ctx.store.unstopped_servers(host):
        if _owner_alive(server):  # another worker on this node, running its own trial
            continue
        left = stop_group(server.pgid, server.create_time, grace_s=10)
        ctx.store.mark_server_stopped(server.trial_id)
        if left:
            ctx.say(f"stopped {left} leftover server process(es) of an interrupted trial "
                    f"(pid {server.pid})")
    for ft in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = ft.user_attrs.get("worker")
        # No worker yet: another worker on this node is starting it (heartbeats judge the rest).
        if ft.user_attrs.get("worker_host") != host or worker is None or _worker_alive(worker):
            continue
        reason = "interrupted: the tuner process running this trial died"
        study._storage.set_trial_user_attr(ft._trial_id, "failure_kind", "interrupted")
        study._storage.set_trial_state_values(ft._trial_id, TrialState.FAIL)
        record = ctx.store.trial(ctx.name, ft.number)
        if record is not None and record.state == "running":
            ctx.store.finish_trial(record.id, state="failed", failure_kind="interrupted",
                                   failure_reason=reason, log_tail=_read_tail(record.log_path))
        ctx.say(f"trial {ft.number} was interrupted by a crash of its tuner: marked failed")


def _owner_alive(server: ServerRecord) -> bool:
    """Whether the tuner that launched this server still runs it: the server's leader is the
    recorded process and still the child of the recorded tuner process."""
    try:
        leader = psutil.Process(server.pid)
        return (server.worker_pid is not None and leader.ppid() == server.worker_pid
                and abs(leader.create_time() - server.create_time) < 1.0)
    except psutil.Error:
        return False


def reap_stale(ctx: StudyContext, study: optuna.Study) -> None:
    """Fail the trials of workers that stopped sending heartbeats (Optuna enqueues each for one
    retry), mark them interrupted in tuner's table and, on this node, stop their servers."""
    optuna.storages.fail_stale_trials(study)
    running = ctx.store.running_trials(ctx.name)
    if not running:
        return
    failed = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
    for record in [r for r in running if r.number in failed]:
        if record.worker_host == ctx.inventory.host:
            for server in ctx.store.unstopped_servers(ctx.inventory.host):
                if server.trial_id == record.id:
                    stop_group(server.pgid, server.create_time, grace_s=10)
                    ctx.store.mark_server_stopped(record.id)
        reason = f"interrupted: worker {record.worker_host} stopped sending heartbeats"
        if ctx.store.interrupt_trial(record.id, reason=reason,
                                     log_tail=_read_tail(record.log_path)):
            ctx.say(f"trial {record.number} {reason}: marked failed, to be retried once")


def _read_tail(path: str | None, n: int = 40) -> str | None:
    if not path:
        return None
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return None


# ---------------------------------------------------------------- one trial


def _level_line(m: LevelMeasurement) -> str:
    def f(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    verdict = "meets SLA" if m.meets_sla else "misses SLA"
    errs = f"  {m.errors} errors" if m.errors else ""
    if m.acceptance_rate is not None:
        verdict += (f"  drafts accepted {m.acceptance_rate:.0%} "
                    f"(length {m.acceptance_length:.2f})")
    where = f"c={m.concurrency:<4}" if m.request_rate is None else f"{m.request_rate:g} req/s"
    ci = ("" if m.output_tok_s_ci95 is None or not m.output_tok_s
          else f" ±{m.output_tok_s_ci95 / m.output_tok_s:.1%}")
    rounds = "" if not m.rounds or m.rounds < 2 else (
        f"  {m.rounds} rounds" + ("" if m.converged else ", NOT CONVERGED"))
    return (f"    {where} {m.output_tok_s_per_gpu:>9,.0f} tok/s/GPU{ci}  "
            f"TTFT p90 {f(m.ttft_p90_ms, ',.0f')} ms  user p90 "
            f"{f(m.tok_s_per_user_p90, ',.0f')} tok/s  {verdict}{errs}{rounds}")


def _tokenizer_json(ctx: StudyContext) -> Path:
    w = ctx.spec.workload
    tokenizer = Path(ctx.settings.model) / "tokenizer.json"
    if not tokenizer.is_file():
        fix = ("use prompt_source synthetic" if w.api == "completions"
               else "serve a model directory that has one")
        raise BadInput(f"workload.prompt_source {w.prompt_source} needs the model's "
                       f"tokenizer.json ({tokenizer} is missing): {fix}")
    return tokenizer


def sweep_prompts(ctx: StudyContext) -> list[list[int] | Prompt]:
    """One prompt per request of the whole sweep (every round of every level, warm-up included):
    fresh ones, so none is served from a prefix cache, except that a prompt file shorter than
    the sweep is cycled."""
    w = ctx.spec.workload
    n = w.prompts_needed()
    if w.prompt_source == "file":
        try:
            records = read_prompt_file(Path(w.prompt_file))
            return file_prompts(records, n, api=w.api, input_len=w.input_len,
                                output_len=w.output_len, output_len_from=w.output_len_from,
                                tokenizer_json=_tokenizer_json(ctx), seed=w.seed)
        except PromptFileError as e:
            raise BadInput(str(e)) from e
    if w.range_ratio:
        # Windows as long as the longest draw, each cut to its own length.
        longest_in = longest(w.input_len, w.range_ratio)
        windows = (corpus_token_prompts(n, longest_in, _tokenizer_json(ctx), w.seed)
                   if w.prompt_source == "corpus" else
                   synthetic_token_prompts(n=n, input_len=longest_in,
                                           vocab_size=ctx.shape.vocab_size, seed=w.seed))
        spread = spread_prompts(windows, w.input_len, w.output_len, w.range_ratio, w.seed)
        return as_text(spread, _tokenizer_json(ctx)) if w.api == "chat" else spread
    if w.prompt_source == "corpus":
        if w.api == "chat":
            return corpus_text_prompts(n, w.input_len, _tokenizer_json(ctx), w.seed)
        return corpus_token_prompts(n, w.input_len, _tokenizer_json(ctx), w.seed)
    return synthetic_token_prompts(n=n, input_len=w.input_len,
                                   vocab_size=ctx.shape.vocab_size, seed=w.seed, avoid_ids=())


def measure(ctx: StudyContext, server: ServerProcess, plan: LaunchPlan,
            deadline: float) -> list[LevelMeasurement]:
    """Run the spec's sweep against a ready server and return one row per level measured.

    Each level: warm-up, then rounds until output tok/s is known within workload.ci_target (or
    max_rounds), with the engine's scheduler gauges sampled in the background and its
    speculative-decoding counters read before and after. Ends early, with the levels so far,
    when the server dies, the deadline passes or the study is stopping. Knows nothing of Optuna.
    """
    w = ctx.spec.workload
    prompts = sweep_prompts(ctx)
    sla = ctx.spec.sla.to_sla()
    levels: list[LevelMeasurement] = []
    counts = [read_spec_decode(plan.engine, plan.base_url)]

    def on_level(run) -> None:
        m = summarize_level(run, plan.gpus, sla, ci_target=w.ci_target)
        counts.append(read_spec_decode(plan.engine, plan.base_url))
        if counts[-1] is not None and counts[-2] is not None:
            d = counts[-1] - counts[-2]
            if d.draft_tokens:
                m = replace(m, spec_drafts=d.drafts, spec_draft_tokens=d.draft_tokens,
                            spec_accepted_tokens=d.accepted_tokens)
        levels.append(m)
        ctx.say(_level_line(m))

    run_sweep(
        plan.base_url, plan.model, prompts, w.concurrency, w.requests_per_level, w.output_len,
        w.warmup_requests, w.request_timeout_s, on_level=on_level,
        stop=lambda: not server.alive() or time.monotonic() > deadline or ctx.stop.is_set(),
        api=w.api, rates=w.request_rates if w.arrival == "poisson" else None,
        repeats=Repeats(w.max_rounds, w.ci_target), seed=w.seed,
        monitor=gauge_monitor(plan.engine, plan.base_url),
    )
    return levels


def _check_stop(ctx: StudyContext) -> None:
    if ctx.stop.is_set():
        raise KeyboardInterrupt  # recorded as interrupted by run_trial, like Ctrl-C


def run_trial(ctx: StudyContext, study: optuna.Study, trial: optuna.Trial,
              params: dict[str, Any], devices: list[int] | None = None) -> TrialResult:
    devices = list(devices if devices is not None else ctx.inventory.devices)
    plan, server = server_for(ctx, params, devices, f"trial-{trial.number:04d}")
    trial.set_user_attr("worker_host", ctx.inventory.host)
    trial.set_user_attr("worker", _worker_id())
    trial.set_user_attr("devices", devices[: ctx.adapter.world_size(params)])
    trial_id = ctx.store.start_trial(
        ctx.name, trial.number, params, worker_host=ctx.inventory.host, worker_pid=os.getpid(),
        launch_plan=plan.to_dict(), gpus=plan.gpus, hardware=ctx.inventory.to_dict(),
        log_path=str(server.log_path), budget=ctx.budget,
    )
    result = TrialResult(trial.number, params, "failed")
    levels: list[LevelMeasurement] = []
    engine_version = log_tail = None
    try:
        engine_version = serve_and_measure(ctx, server, plan, trial_id, levels)
        value, best, meets = objective(levels)
        result.state, result.objective, result.meets_sla = "complete", value, meets
        for key, v in sla_violations(best, ctx.spec.sla.to_sla()).items():
            trial.set_constraint(key, v)
        trial.set_user_attr("best_concurrency", best.concurrency)
        trial.set_user_attr("meets_sla", meets)
    except LaunchFailure as f:
        result.failure_kind, result.failure_reason = f.kind, f.reason
        ctx.say(f"  failed ({f.kind}): {f.reason}")
        log_tail = f.log_tail
    except BaseException:  # Ctrl-C, SIGTERM: record (the server is already stopped), propagate
        ctx.store.finish_trial(trial_id, state="failed", failure_kind="interrupted",
                               failure_reason="interrupted: the tuner was stopped",
                               log_tail=_read_tail(str(server.log_path)), measurements=levels)
        trial.set_user_attr("failure_kind", "interrupted")
        study.tell(trial, state=TrialState.FAIL)
        raise
    result.measurements = levels
    ctx.store.finish_trial(
        trial_id, state=result.state, objective=result.objective, meets_sla=result.meets_sla,
        failure_kind=result.failure_kind, failure_reason=result.failure_reason,
        log_tail=log_tail, engine_version=engine_version, measurements=levels,
    )
    if result.state == "complete":
        study.tell(trial, result.objective)
    else:
        tell_unusable(study, trial, "failed", result.failure_kind, result.failure_reason)
    return result


def server_for(ctx: StudyContext, params: dict[str, Any], devices: list[int],
               run_name: str) -> tuple[LaunchPlan, ServerProcess]:
    """The launch plan of a configuration on its devices, and its (not yet started) server,
    which logs under runs_dir/run_name."""
    port = ctx.spec.engine.port or free_port(HOST)
    workdir = ctx.runs_dir / run_name
    plan = ctx.adapter.launch_plan(params, ctx.settings, host=HOST, port=port,
                                   inventory=ctx.inventory, devices=devices,
                                   workdir=str(workdir.resolve()))
    return plan, ServerProcess(plan, workdir)


def serve_and_measure(ctx: StudyContext, server: ServerProcess, plan: LaunchPlan, trial_id: int,
                      levels: list[LevelMeasurement]) -> str | None:
    """One serving run: start the server, wait until ready, sweep the workload into `levels`,
    judge it. Returns the engine's version; raises LaunchFailure when the run failed, and lets an
    interrupt through. Whatever happens, the server is stopped and recorded as stopped.

    A trial and its confirmation in a fresh server both run through here, so they measure alike.
    """
    t0 = time.monotonic()
    deadline = t0 + ctx.spec.budget.trial_timeout_s
    try:
        server.start()
        ctx.store.record_server(trial_id, host=ctx.inventory.host, pid=server.pid,
                                pgid=server.pid, create_time=server.create_time or 0.0,
                                log_path=str(server.log_path))
        ready_s = server.wait_ready(min(ctx.spec.engine.ready_timeout_s, deadline - t0),
                                    tick=lambda _: _check_stop(ctx))
        engine_version = server.engine_version()
        ctx.say(f"  server ready in {ready_s:.1f} s ({plan.engine} {engine_version or '?'})")
        levels.extend(measure(ctx, server, plan, deadline))
        _check_stop(ctx)
        failure = _verdict(ctx, server, levels, deadline)
        if failure:
            raise failure
        return engine_version
    finally:
        if server.proc is not None:
            server.stop()
            ctx.store.mark_server_stopped(trial_id)


def tell_unusable(study: optuna.Study, trial: optuna.Trial, constraint: str, kind: str | None,
                  reason: str | None) -> None:
    """A configuration that failed or cannot run: for the sampler, a violated constraint.

    Optuna's TPE ignores FAIL trials, so it would keep proposing a configuration that crashes;
    as an infeasible COMPLETE trial it lands in TPE's bad group and the search steers away.
    tuner's own table keeps the true state (failed / infeasible) and the reason; FAIL in
    Optuna is kept for trials cut short by the tuner itself (not the configuration's fault).
    """
    trial.set_user_attr("failure_kind", kind)
    trial.set_user_attr("failure_reason", reason)
    trial.set_constraint(constraint, 1.0)
    study.tell(trial, 0.0)


def _verdict(ctx: StudyContext, server: ServerProcess, levels: list[LevelMeasurement],
             deadline: float) -> LaunchFailure | None:
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
    if len(levels) < ctx.spec.workload.level_count:
        if time.monotonic() > deadline:
            limit = ctx.spec.budget.trial_timeout_s
            return LaunchFailure("timeout", f"sweep not finished within {limit:.0f} s",
                                 tail(server.log_text()))
        return server.failure("request_errors", "the sweep ended early")
    dead = [m for m in levels if m.requests and m.errors == m.requests]
    if dead:
        f = server.failure("request_errors", f"every request failed at c={dead[0].concurrency}: "
                           f"{dead[0].error_sample}")
        return f
    return None


# ---------------------------------------------------------------- the loop


def _finished_configs(ctx: StudyContext) -> dict[str, TrialRecord]:
    done = {}
    for t in ctx.store.trials(ctx.name):
        if t.state == "complete" or (t.state == "failed" and t.failure_kind != "interrupted"):
            done.setdefault(_key(t.params), t)
    return done


def _key(params: dict[str, Any]) -> str:
    return repr(sorted(params.items()))


def _tell_repeat(study: optuna.Study, trial: optuna.Trial, earlier: TrialRecord) -> None:
    """A repeat of a finished configuration: tell Optuna the earlier result, launch nothing."""
    trial.set_user_attr("repeat_of", earlier.number)
    ft = next(t for t in study.get_trials(deepcopy=False) if t.number == earlier.number)
    if ft.state != TrialState.COMPLETE:
        study.tell(trial, state=TrialState.FAIL)
        return
    for k, v in ft.constraints.items():
        trial.set_constraint(k, v)
    study.tell(trial, ft.value)


@contextmanager
def sigterm_as_interrupt():
    """SIGTERM ends a study like Ctrl-C does, so servers are stopped and trials recorded."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run_study(ctx: StudyContext, n_trials: int, warm_start: int = 0) -> list[TrialResult]:
    """Run the study until `n_trials` count toward its budget. Several processes (`tuner
    worker`, on several nodes) may run one study at once: the budget is claimed atomically in
    the store, and each worker skips what another has finished or is running."""
    study = load_or_create_study(ctx)
    ctx.budget = n_trials
    recover(ctx, study)
    reap_stale(ctx, study)
    done = _finished_configs(ctx)
    if warm_start:
        _warm_start(ctx, study, warm_start, set(done))
    # Keyed once: the loop asks "what is left?" before every trial.
    feasible = {_key(c): c for c in ctx.space.enumerate() if ctx.infeasible(c) is None}
    running = len(ctx.store.running_trials(ctx.name))  # by other workers
    elsewhere = f" ({running} running elsewhere)" if running else ""
    ctx.say(f"study {ctx.name}: space {ctx.space.name} has {ctx.space.size()} configurations, "
            f"{len(feasible)} feasible on {ctx.inventory.description}; "
            f"{ctx.store.budget_used(ctx.name) - running} of {n_trials} trials done{elsewhere}; "
            f"storage {mask_url(ctx.storage_url)}")
    results: list[TrialResult] = []
    started = time.monotonic()
    timeout = ctx.spec.budget.timeout_min
    infeasible_seen: set[str] = set()
    idle = 0  # asks in a row that launched nothing
    rng = random.Random(ctx.spec.sampler.seed)
    poll_s = ctx.spec.budget.heartbeat_interval_s

    def record(key: str, result: TrialResult) -> None:
        results.append(result)
        done[key] = ctx.store.trial(ctx.name, result.number)
        if result.state == "complete":
            verdict = "meets SLA" if result.meets_sla else "misses SLA"
            ctx.say(f"  -> trial {result.number}: {result.objective:,.0f} tok/s/GPU, {verdict}")

    with sigterm_as_interrupt(), TrialRunner(ctx, study) as runner:
        while True:
            for key, result in runner.collect():
                record(key, result)
            reap_stale(ctx, study)
            # Fresh from the store: other workers finish and start trials too.
            done.update(_finished_configs(ctx))
            elsewhere = {_key(t.params) for t in ctx.store.running_trials(ctx.name)}
            running = runner.keys | elsewhere
            used = max(ctx.store.budget_used(ctx.name), len(done) + runner.in_flight)
            untried = [c for k, c in feasible.items() if k not in done and k not in running]
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
            if timeout and time.monotonic() - started > timeout * 60:
                ctx.say(f"budget.timeout_min ({timeout:g} min) reached: no new trial started")
                runner.wait_all()
                for key, result in runner.collect():
                    record(key, result)
                break
            if idle >= MAX_IDLE_ASKS:
                # The sampler keeps proposing what is known: hand it an untried configuration.
                study.enqueue_trial(rng.choice(untried))
                idle = 0
            trial = study.ask()
            params = ctx.space.sample(trial)
            key = _key(params)
            if key in done:
                _tell_repeat(study, trial, done[key])
                idle += 1
                continue
            if key in running:  # being measured right now: nothing to learn yet
                trial.set_user_attr("repeat_of_running", True)
                study.tell(trial, state=TrialState.FAIL)
                idle += 1
                continue
            reason = ctx.infeasible(params)
            if reason:
                tell_unusable(study, trial, "infeasible", "infeasible", reason)
                idle += 1
                if key not in infeasible_seen:
                    infeasible_seen.add(key)
                    ctx.store.record_infeasible(ctx.name, trial.number, params, reason)
                    ctx.say(f"trial {trial.number}  {describe(params)}\n  infeasible: {reason}")
                    results.append(TrialResult(trial.number, params, "infeasible",
                                               failure_kind="infeasible", failure_reason=reason))
                continue
            idle = 0
            retry = optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(
                study._storage.get_trial(trial._trial_id))
            again = f", retry of trial {retry}" if retry is not None else ""
            ctx.say(f"trial {trial.number}  {describe(params)}  ({used + 1}/{n_trials}{again})")
            runner.submit(trial, params, key)
        for key, result in runner.collect():
            record(key, result)
    return results


class Heartbeat:
    """Records that a trial's worker is alive every heartbeat interval, from a thread of its own,
    while the trial waits for devices and runs. Optuna beats only inside `study.optimize`; tuner
    asks and tells, so it beats itself. Without beats (a SIGKILLed worker), another worker fails
    the trial after the grace period and Optuna retries it once."""

    def __init__(self, study: optuna.Study, trial: optuna.Trial, interval_s: float, say: Say):
        self._storage, self._trial_id = study._storage, trial._trial_id
        self._interval, self._say = interval_s, say
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{trial.number}",
                                        daemon=True)

    def _beat(self) -> None:
        warned = False
        while True:
            try:
                self._storage.record_heartbeat(self._trial_id)
            except Exception as e:  # a database blip: the next beat may pass; say it once
                if not warned:
                    self._say(f"  heartbeat not recorded ({type(e).__name__}); retrying")
                    warned = True
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> Heartbeat:
        self._storage.record_heartbeat(self._trial_id)  # beating before anything is claimed
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


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
        self._finished: list[tuple[str, TrialResult]] = []

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def keys(self) -> set[str]:
        return set(self._running.values())

    def _heartbeat(self, trial: optuna.Trial) -> Heartbeat:
        return Heartbeat(self.study, trial, self.ctx.spec.budget.heartbeat_interval_s,
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
            block = self.pool.acquire(self.ctx.adapter.world_size(params), self.ctx.stop)
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
        """run_trial, or None where the store refused the claim: the budget was spent by
        other workers since this one asked (the asked trial is told FAIL, not counted)."""
        try:
            return run_trial(self.ctx, self.study, trial, params, block)
        except BudgetSpent:
            trial.set_user_attr("budget_spent", True)
            self.study.tell(trial, state=TrialState.FAIL)
            self.ctx.say(f"  trial {trial.number} not started: the study's budget is spent")
            return None
        except (StoreError, optuna.exceptions.UpdateFinishedTrialError):
            # Another worker took this trial for dead (its heartbeats came too late) and failed
            # it; the retry it queued measures the configuration again. The server is stopped.
            if self.study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
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


def _warm_start(ctx: StudyContext, study: optuna.Study, k: int, done: set[str]) -> None:
    """The performance model's top k configurations that fit become the next trials; what it
    says cannot fit in memory is rejected before launch like any infeasible sample."""
    from tuner.plan.planner import warm_start

    queued = warm_start(ctx, study, k, done=done, store=ctx.store, study_name=ctx.name,
                        checks=ctx.checks)
    ctx.say(f"warm start: the performance model queued {len(queued)} configuration(s) first"
            + "".join(f"\n  {describe(c)}" for c in queued))
