"""Why a configuration cannot run, decided before any launch: an infeasible sample costs no
server. The facts every engine enforces live here; each engine's own rules come from its
adapter, which implements `EngineRules` (tuner.serve.engines), then the study's further checks
(the performance model's memory fit)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tuner.spec.gpu_types import GpuType
from tuner.spec.model_shape import ModelShape
from tuner.spec.space import replicas_of


class EngineRules(Protocol):
    """What feasibility asks of an engine adapter. `settings` is the engine's fixed settings
    (tuner.serve.engines.EngineSettings), passed through: the spec layer reads none of it."""

    def world_size(self, config: dict[str, Any]) -> int: ...

    def expert_parallel_width(self, config: dict[str, Any]) -> int: ...

    def infeasibility(self, config: dict[str, Any], shape: ModelShape, gpu: GpuType,
                      settings: Any) -> str | None: ...


# A further feasibility check (e.g. the performance model's memory fit): the reason, or None.
Check = Callable[[dict[str, Any]], "str | None"]


def infeasibility(config: dict[str, Any], *, shape: ModelShape, devices: int,
                  adapter: EngineRules, gpu: GpuType, settings: Any,
                  checks: Sequence[Check] = (), per_rank: int = 1) -> str | None:
    """Why this configuration cannot run, or None. Only facts the engines enforce live here;
    engine-specific rules come from the adapter, then each of `checks` in order. `per_rank`:
    the devices one rank is bound to (CPU cores per rank; 1 on a GPU node)."""
    replicas = replicas_of(config)
    if "router_policy" in config and replicas < 2:
        return "router_policy needs replicas > 1: one server has nothing to route between"
    # Each replica is a whole server with the configuration's ranks, on devices of its own.
    world = adapter.world_size(config) * replicas
    tp = int(config.get("tensor_parallel_size", 1))
    if world * per_rank > devices:
        parts = ([f"{replicas} replicas"] if replicas > 1 else []) + (
            [f"{world // replicas} ranks"] if replicas > 1 or per_rank > 1 else []) + (
            [f"{per_rank} cores"] if per_rank > 1 else [])
        of = f" ({' x '.join(parts)})" if parts else ""
        return f"needs {world * per_rank} devices{of}, the node has {devices}"
    if not config.get("enable_attention_dp") and shape.num_attention_heads % tp:
        return f"TP {tp} does not divide the {shape.num_attention_heads} attention heads"
    ep = adapter.expert_parallel_width(config)
    if ep > 1 or config.get("enable_expert_parallel"):
        if not shape.is_moe:
            return "expert parallel needs a Mixture-of-Experts model"
        if ep <= 1:
            return "expert parallel over a single rank is the same as no expert parallel"
        if shape.num_experts % ep:
            return f"EP over {ep} ranks does not divide the {shape.num_experts} experts"
    reason = adapter.infeasibility(config, shape, gpu, settings)
    for check in checks:
        if reason is not None:
            break
        reason = check(config)
    return reason
