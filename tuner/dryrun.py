"""`tuner run --dry-run`: the launch plans a study would use, for any GPU type, nothing started.

Samples from the spec's search space with the spec's sampler in memory (no database, no model
download, no server) so a user can review the exact argv, environment and files on a laptop.
The node is the one the spec (or --gpu) names, planned rather than detected.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from tuner.engines import LaunchPlan, get_adapter
from tuner.hardware import planned_inventory
from tuner.hwtypes import gpu_type
from tuner.space import infeasibility, load_space
from tuner.spec import EngineSpec, StudySpec, resolve_space_path
from tuner.study import check_space, engine_settings, model_shape

DEPLOY_PORT = 8000


@dataclass
class PlannedTrial:
    number: int
    params: dict[str, Any]
    plan: LaunchPlan | None
    infeasible: str | None


def dry_run(spec: StudySpec, spec_path: Path, *, gpu: str | None, engine: str | None,
            n_trials: int) -> tuple[str, list[PlannedTrial]]:
    if engine and engine != spec.engine.name:
        # The spec's engine section belongs to its own engine: keep only what is neutral.
        neutral = {"name": engine, "draft_model": spec.engine.draft_model}
        spec = spec.model_copy(update={"engine": EngineSpec(**neutral)})
    gpu_t = gpu_type(gpu or spec.hardware.gpu_type, "--gpu" if gpu else "hardware.gpu_type")
    adapter = get_adapter(spec.engine.name)
    space = load_space(resolve_space_path(spec, spec_path), spec.engine.name, gpu_t)
    check_space(spec, space, adapter)
    local = Path(spec.model.path).expanduser()
    shape = model_shape(spec, local if local.exists() else None)
    inventory = planned_inventory(gpu_t, spec.hardware.devices)
    settings = engine_settings(spec, spec.engine.executable or adapter.default_executable,
                               spec.model.path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.RandomSampler(seed=spec.sampler.seed))
    seen: set[str] = set()
    planned: list[PlannedTrial] = []
    for _ in range(n_trials * 50):  # bounded: a small space may have fewer configurations
        if sum(p.plan is not None for p in planned) >= n_trials:
            break
        trial = study.ask()
        params = space.sample(trial)
        study.tell(trial, 0.0)
        key = repr(sorted(params.items()))
        if key in seen:
            continue
        seen.add(key)
        reason = infeasibility(params, shape=shape, devices=len(inventory.devices),
                               adapter=adapter, gpu=gpu_t, settings=settings)
        workdir = (Path(spec.runs_dir) / spec.name / f"trial-{len(planned):04d}").resolve()
        plan = None if reason else adapter.launch_plan(
            params, settings, host="0.0.0.0", port=DEPLOY_PORT,  # noqa: S104
            inventory=inventory, devices=list(inventory.devices), workdir=str(workdir))
        planned.append(PlannedTrial(len(planned), params, plan, reason))
    header = (f"dry run of {spec.name}: {spec.engine.name} on {inventory.description}, "
              f"space {space.name} ({space.size()} configurations); nothing is started")
    return header, planned
