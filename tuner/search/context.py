"""A study made ready to run: everything it needs, validated in an order that touches nothing
until it all holds (the spec's space, engine, devices, port, prompt file, model and prompts; the
store last, so no database file or study row is made for a study that cannot run)."""

from __future__ import annotations

import hashlib
import os
import resource
import shlex
import shutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuner.measure.prompt_file import PromptFileError, read_prompt_file
from tuner.measure.prompts import longest, sweep_prompts
from tuner.measure.quality_tasks import read_tasks, task_prompts
from tuner.serve.engines import EngineAdapter, EngineSettings, get_adapter
from tuner.serve.hardware import Inventory, bind_ranks, detect, owned_devices
from tuner.serve.launcher import port_is_free
from tuner.serve.routers import get_router, has_router, policy_infeasibility, world_size
from tuner.spec.errors import BadInput
from tuner.spec.feasibility import Check, infeasibility
from tuner.spec.gpu_types import GpuType, gpu_type
from tuner.spec.model_shape import ModelShape, read_model_shape, shape_by_name
from tuner.spec.names import check_study_name, folder_of
from tuner.spec.space import DEPLOYMENT_PARAMETERS, SearchSpace, describe, load_space
from tuner.spec.study_spec import DEFAULT_STORAGE, StudySpec, resolve_space_path
from tuner.store import QualityReference, Store, StoreError, mask_url

HOST = "127.0.0.1"
Say = Callable[[str], None]


@dataclass
class RunState:
    """What changes while a loop runs a study, written through these methods only: the budget
    a loop runs to, the quality gate's reference answers once it has them, the further
    feasibility checks a warm start adds (the model's memory fit)."""

    # The study's trial budget while a loop runs it: claims beyond it are refused by the store.
    budget: int | None = None
    # The quality gate's reference answers (None: not yet, or the gate is off).
    reference: QualityReference | None = None
    checks: list[Check] = field(default_factory=list)

    def run_to(self, budget: int) -> None:
        self.budget = budget

    def keep_reference(self, reference: QualityReference | None) -> None:
        self.reference = reference

    def add_check(self, check: Check) -> None:
        self.checks.append(check)


@dataclass(frozen=True)
class StudyContext:
    """A study made ready from its spec: what every stage reads and none changes, and the
    run's changing state (`run`)."""

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
    # Who runs the study, when several may (a `tuner worker`): the sampler's seed is derived from
    # the spec's and this, so workers on one study do not all propose the same configuration.
    worker: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)  # set: end every trial
    run: RunState = field(default_factory=RunState)

    @property
    def sampler_seed(self) -> int | None:
        seed = self.spec.sampler.seed
        if seed is None or self.worker is None:
            return seed
        digest = hashlib.sha256(f"{seed}:{self.worker}".encode()).digest()
        return int.from_bytes(digest[:4], "big")

    def infeasible(self, config: dict[str, Any]) -> str | None:
        reason = infeasibility(config, shape=self.shape, devices=len(self.inventory.devices),
                               adapter=self.adapter, gpu=self.gpu, settings=self.settings,
                               checks=self.run.checks, per_rank=self.inventory.per_rank)
        return reason or policy_infeasibility(self.adapter.name, config)



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
        "install the engine on this node (on a CPU machine `make install` installs vLLM's CPU "
        "build) or set engine.executable"
    )


def check_space(spec: StudySpec, space: SearchSpace, adapter: EngineAdapter) -> None:
    if space.engine != spec.engine.name:
        raise BadInput(
            f"search_space {space.name} is for engine {space.engine}, the spec's engine.name is "
            f"{spec.engine.name}: use a space of that engine"
        )
    deployed = set(space.parameters) & DEPLOYMENT_PARAMETERS
    unsupported = set(space.parameters) - adapter.supported_parameters - (
        DEPLOYMENT_PARAMETERS if has_router(adapter.name) else frozenset())
    if unsupported:
        raise BadInput(
            f"search_space {space.name}: {adapter.name} cannot express {sorted(unsupported)}"
            + (" (no router fronts its replicas yet)" if unsupported & deployed else "")
        )
    if "router_policy" in space.parameters:
        router = get_router(adapter.name)
        unknown = [v for v in space.values("router_policy") if v not in router.policies]
        if unknown:
            names = ", ".join(map(str, unknown))
            raise BadInput(f"search_space {space.name}: router_policy {names} is not a policy "
                           f"of {router.name} (its policies: {', '.join(router.policies)})")


def check_quality(spec: StudySpec, adapter: EngineAdapter) -> None:
    """The quality gate's reference configuration is one the engine can express, and its task
    file (if any) can be read and sent on the workload's API."""
    unknown = sorted(set(spec.quality.reference or {}) - adapter.supported_parameters)
    if unknown:
        raise BadInput(f"quality.reference: {adapter.name} has no parameter {', '.join(unknown)}: "
                       f"use canonical names ({', '.join(sorted(adapter.supported_parameters))})")
    tasks = spec.quality.tasks
    if tasks is not None:
        try:
            task_prompts(read_tasks(Path(tasks.file), tasks.match), spec.workload.api)
        except PromptFileError as e:
            raise BadInput(f"quality.tasks.file: {e}") from e


def check_prompt_file(spec: StudySpec) -> None:
    """A bad prompt file fails before anything starts, naming its line (the tokenizer's pick
    comes later, once the model is there)."""
    if spec.workload.prompt_source == "file":
        try:
            read_prompt_file(Path(spec.workload.prompt_file))
        except PromptFileError as e:
            raise BadInput(str(e)) from e


def check_prompts(spec: StudySpec, model_dir: Path, vocab_size: int) -> None:
    """The sweep's prompts can be made for this model (the corpus holds input_len tokens of its
    tokenizer, a prompt file has prompts that fit, the tokenizer is there), checked on the
    first prompt of the sweep, by the code that makes them for a trial."""
    w = spec.workload
    try:
        sweep_prompts(w, model_dir, vocab_size, n=1)
    except BadInput:
        raise
    except Exception as e:  # the tokenizer library raises its own, bare Exceptions
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BadInput(f"workload: the prompts of prompt_source {w.prompt_source} cannot be "
                       f"made for model.path {spec.model.path} ({first}): lower input_len, or "
                       "use prompt_source synthetic") from e


def check_lengths(spec: StudySpec, shape: ModelShape) -> None:
    """A request's prompt and output must fit the model's context, or every request of every
    trial is refused by a server that took a minute to start."""
    w = spec.workload
    context = shape.max_position_embeddings
    need = longest(w.input_len, w.range_ratio) + longest(w.output_len, w.range_ratio)
    if w.conversation is not None:  # the last turn resends the whole conversation
        need = w.conversation.longest_prompt(w.input_len, w.output_len) + w.output_len
    if isinstance(context, int) and need > context:
        raise BadInput(f"workload.input_len + output_len: a request needs up to {need:,} tokens "
                       f"and the model's context holds {context:,} (max_position_embeddings): "
                       "lower input_len or output_len")
    q = spec.quality
    gate = (w.input_len if w.prompt_source == "file" else q.input_len) + q.max_tokens
    if q.enabled and isinstance(context, int) and gate > context:
        raise BadInput(f"quality.input_len + max_tokens: a quality prompt needs up to {gate:,} "
                       f"tokens and the model's context holds {context:,}: lower them")


def check_connections(spec: StudySpec) -> None:
    """Each request in flight holds a connection, a file of this process: a level beyond the
    process's open-file limit would be stored under a concurrency it never ran at."""
    w = spec.workload
    # A load search's highest level is its trial's batch limit unless load_search.max bounds it.
    levels = w.concurrency if w.concurrency != "auto" else [int(w.search.max or 0)]
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = max(levels) + 256  # the database, logs, the server's pipes
    if soft != resource.RLIM_INFINITY and needed > soft:
        raise BadInput(f"workload.concurrency {max(levels):,} needs about "
                       f"{needed:,} open files and this process may open {soft:,}: raise the "
                       f"limit (`ulimit -n {needed}`) or lower the level")


def ensure_model(spec: StudySpec, say: Say) -> Path:
    path = Path(spec.model.path).expanduser()
    if not path.exists():
        if spec.model.generate is None:
            raise BadInput(
                f"model.path {spec.model.path} does not exist: create it with "
                f"`tuner model tiny --out {shlex.quote(spec.model.path)}` or add "
                "`generate: tiny-gpt-oss`"
            )
        from tuner.serve.tiny_model import GENERATORS

        say(f"generating the {spec.model.generate} model at {path} (seed {spec.model.seed})")
        GENERATORS[spec.model.generate](path, seed=spec.model.seed)
    return path.resolve()


def open_store(url: str, *, create: bool = True) -> Store:
    try:
        return Store.open(url, create=create, upgrade=True)  # a writer: brings it up to date
    except StoreError as e:
        raise BadInput(str(e)) from e


def prepare(
    spec: StudySpec, spec_path: Path, *, storage_url: str | None, study_name: str | None, say: Say
) -> StudyContext:
    """Validate everything a study needs, in an order that touches nothing until it all holds."""
    if study_name is not None:
        check_study_name(study_name, "--study-name")
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
    ctx = _context(spec, space, url=storage_url, name=study_name, say=say, store=store,
                   devices=devices)
    return replace(ctx, worker=f"{ctx.inventory.host}:{os.getpid()}")


def _context(spec: StudySpec, space: SearchSpace, *, url: str, name: str, say: Say,
             store: Store | None = None, devices: list[int] | None = None) -> StudyContext:
    gpu = gpu_type(spec.hardware.gpu_type)
    adapter = get_adapter(spec.engine.name)
    check_space(spec, space, adapter)
    check_quality(spec, adapter)
    check_prompt_file(spec)
    check_connections(spec)
    inventory = bind_ranks(_inventory(spec, devices), spec.hardware.cores_per_rank,
                           sorted({world_size(adapter, c) for c in _cpu_space(space, gpu)}),
                           spec.budget.parallel_trials)
    executable = resolve_executable(spec.engine.executable or adapter.default_executable)
    if spec.engine.port is not None and spec.budget.parallel_trials > 1:
        raise BadInput("engine.port is fixed but budget.parallel_trials > 1: concurrent servers "
                       "need their own ports; leave engine.port out")
    if spec.engine.port is not None and not port_is_free(HOST, spec.engine.port):
        raise BadInput(
            f"engine.port {spec.engine.port} is in use: stop what holds it or leave engine.port "
            "out to use a free port"
        )
    model_dir = ensure_model(spec, say)
    shape = model_shape(spec, model_dir)
    check_lengths(spec, shape)
    check_prompts(spec, model_dir, shape.vocab_size)
    settings = engine_settings(spec, executable, str(model_dir))
    check_command(adapter, space, settings, inventory, say)
    check_load_bounds(spec, space, adapter, settings)
    store = store or open_store(url)  # last: a database is created only once all holds
    return StudyContext(
        spec=spec, name=name, space=space, adapter=adapter, inventory=inventory, shape=shape,
        settings=settings, store=store, storage_url=url,
        runs_dir=folder_of(Path(spec.runs_dir), name), say=say, gpu=gpu,
    )


def _needs_load_bound(spec: StudySpec) -> bool:
    """`workload.concurrency: auto` (a load search, or an open loop's cap) without a
    `load_search.max`: each configuration's own batch limit bounds its load."""
    w = spec.workload
    return w.concurrency == "auto" and not (w.arrival == "concurrency" and w.search.max is not None)


def unbounded_load(spec: StudySpec, adapter: EngineAdapter, settings: EngineSettings,
                   params: dict[str, Any]) -> str | None:
    """Why `params` cannot be measured under the spec's workload, which needs the most requests
    its server runs at once and `params` does not say; None when it can."""
    if not _needs_load_bound(spec) or adapter.max_in_flight(params, settings) is not None:
        return None
    w = spec.workload
    return ("workload.concurrency auto needs the most requests a server runs at once: search "
            "max_batch_size, or set it in engine.args"
            + (" (or set workload.load_search.max)" if w.arrival != "poisson" else ""))


def check_load_bounds(spec: StudySpec, space: SearchSpace, adapter: EngineAdapter,
                      settings: EngineSettings) -> None:
    """Every configuration of the space has what its load needs, said before the first trial,
    not at the first configuration without it, halfway through a study."""
    if not _needs_load_bound(spec):
        return  # no space to walk: most studies start here
    for params in space.enumerate():
        why = unbounded_load(spec, adapter, settings, params)
        if why is not None:
            raise BadInput(f"{why}; the space's configuration {describe(params)} has none")


def check_command(adapter: EngineAdapter, space: SearchSpace, settings: EngineSettings,
                  inventory: Inventory, say: Say) -> None:
    """The command of the space's smallest configuration, read by the engine's own parser
    where it can run here: a fixed engine.args typo ends the study before any server starts."""
    configs = space.enumerate()
    if not configs:
        return
    config = min(configs, key=adapter.world_size)
    world = adapter.world_size(config)
    try:
        plan = adapter.launch_plan(config, settings, host=HOST, port=8000, inventory=inventory,
                                   devices=list(inventory.devices)[:inventory.slot_for(world)])
    except (BadInput, ValueError):
        return  # not a plan this node can build: the trials say why
    reason = adapter.command_rejection(plan, say)
    if reason is not None:
        raise BadInput(f"engine.args: {adapter.name}'s own parser rejects the command a trial "
                       f"would start ({reason}): fix or remove that argument in engine.args "
                       "(or the search space's value)")


def _cpu_space(space: SearchSpace, gpu: GpuType) -> list[dict[str, Any]]:
    """The configurations whose world sizes set a CPU node's cores per rank (none on a GPU)."""
    return space.enumerate() if gpu.arch == "cpu" else []


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
                          container=container,
                          prefix_caching=spec.workload.conversation is not None)


def model_shape(spec: StudySpec, model_dir: Path | None) -> ModelShape:
    """From the checkpoint's config.json when it is here, else from the named known shape."""
    if model_dir is not None and (model_dir / "config.json").exists():
        return read_model_shape(model_dir)
    if spec.model.shape:
        return shape_by_name(spec.model.shape)
    return read_model_shape(model_dir or Path(spec.model.path))
