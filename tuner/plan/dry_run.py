"""`tuner run --dry-run`: the launch plans a study would use, for any GPU type, nothing started.

Samples from the spec's search space with the spec's sampler in memory (no database, no model
download, no server) so a user can review the exact argv, environment and files on a laptop.
The node is the one the spec (or --gpu) names, planned rather than detected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.search.bridge import sample_configs
from tuner.search.context import check_space, engine_settings, model_shape
from tuner.serve.engines import EngineAdapter, EngineSettings, LaunchPlan, get_adapter
from tuner.serve.hardware import Inventory, planned_inventory
from tuner.serve.routers import (
    engine_config,
    get_router,
    policy_infeasibility,
    policy_of,
    replica_blocks,
)
from tuner.spec.feasibility import infeasibility
from tuner.spec.gpu_types import GpuType, gpu_type
from tuner.spec.model_shape import ModelShape
from tuner.spec.space import SearchSpace, load_space, replicas_of
from tuner.spec.study_spec import EngineSpec, StudySpec, resolve_space_path
from tuner.verdict.rules import config_key

DEPLOY_PORT = 8000


@dataclass
class OfflineStudy:
    """A spec resolved for a GPU type and engine without a node or a checkpoint (dry runs, plans):
    the node is the one the spec (or --gpu) names, planned rather than detected."""

    spec: StudySpec
    gpu: GpuType
    adapter: EngineAdapter
    space: SearchSpace
    shape: ModelShape
    inventory: Inventory
    settings: EngineSettings

    def infeasible(self, config: dict[str, Any]) -> str | None:
        return infeasibility(config, shape=self.shape, devices=len(self.inventory.devices),
                             adapter=self.adapter, gpu=self.gpu, settings=self.settings) \
            or policy_infeasibility(self.adapter.name, config)


def offline_study(spec: StudySpec, spec_path: Path, *, gpu: str | None,
                  engine: str | None) -> OfflineStudy:
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
    settings = engine_settings(spec, spec.engine.executable or adapter.default_executable,
                               spec.model.path)
    return OfflineStudy(spec=spec, gpu=gpu_t, adapter=adapter, space=space, shape=shape,
                        inventory=planned_inventory(gpu_t, spec.hardware.devices),
                        settings=settings)


@dataclass
class PlannedTrial:
    number: int
    params: dict[str, Any]
    plan: LaunchPlan | None  # of replicas: the first replica's
    infeasible: str | None
    replicas: list[LaunchPlan] = field(default_factory=list)  # of replicas: each one's plan
    router: list[str] | None = None  # of replicas: the router's command in front of them


def plan_replicas(offline: OfflineStudy, params: dict[str, Any], workdir: Path
                  ) -> tuple[list[LaunchPlan], list[str]]:
    """A configuration of replicas as a node would run it: each replica on its own block of the
    node's devices (on this host's port DEPLOY_PORT + i), and the router's command on
    DEPLOY_PORT in front of them, its flags as the export deploys it."""
    inner = engine_config(params)
    blocks = replica_blocks(list(offline.inventory.devices), replicas_of(params),
                            offline.adapter.world_size(inner) * offline.inventory.per_rank)
    plans = [offline.adapter.launch_plan(
        inner, offline.settings, host="127.0.0.1", port=DEPLOY_PORT + i,
        inventory=offline.inventory, devices=block, workdir=str(workdir / f"replica-{i}"))
        for i, block in enumerate(blocks, start=1)]
    router = get_router(offline.adapter.name)
    command = router.deploy_command([p.base_url for p in plans], policy_of(router, params),
                                    executable=router.default_executable,
                                    host="0.0.0.0", port=DEPLOY_PORT)  # noqa: S104
    return plans, command


def dry_run(spec: StudySpec, spec_path: Path, *, gpu: str | None, engine: str | None,
            n_trials: int) -> tuple[str, list[PlannedTrial]]:
    offline = offline_study(spec, spec_path, gpu=gpu, engine=engine)
    spec, space, inventory = offline.spec, offline.space, offline.inventory
    seen: set[str] = set()
    planned: list[PlannedTrial] = []
    # Bounded: a small space may have fewer configurations.
    for params in sample_configs(space, spec.sampler.seed, n_trials * 50):
        if sum(p.plan is not None for p in planned) >= n_trials:
            break
        key = config_key(params)
        if key in seen:
            continue
        seen.add(key)
        reason = offline.infeasible(params)
        workdir = (Path(spec.runs_dir) / spec.name / f"trial-{len(planned):04d}").resolve()
        if reason is None and replicas_of(params) > 1:
            replicas, router = plan_replicas(offline, params, workdir)
            planned.append(PlannedTrial(len(planned), params, replicas[0], None, replicas,
                                        router))
            continue
        plan = None if reason else offline.adapter.launch_plan(
            params, offline.settings, host="0.0.0.0", port=DEPLOY_PORT,  # noqa: S104
            inventory=inventory, devices=list(inventory.devices), workdir=str(workdir))
        planned.append(PlannedTrial(len(planned), params, plan, reason))
    header = (f"dry run of {spec.name}: {spec.engine.name} on {inventory.description}, "
              f"space {space.name} ({space.size()} configurations); nothing is started")
    return header, planned
