"""Routers in front of a configuration's replicas: one adapter per router, behind the `Router`
protocol, looked up by the engine its replicas run (each engine family ships its own router).

A router is a real one, not written here; tuner builds its command, starts it with the
launcher beside the replicas and stops it with them (`tuner.serve.routers.replicas.deployment`,
imported from there: this package's own names reach no launcher).
"""

from __future__ import annotations

from typing import Any

from tuner.serve.routers.base import Router, find_executable
from tuner.serve.routers.configs import engine_config, policy_of, replica_blocks, world_size
from tuner.serve.routers.vllm_router import VllmRouter
from tuner.spec.errors import BadInput
from tuner.spec.space import replicas_of

# Engine -> the router that fronts its replicas.
_ROUTERS: dict[str, Router] = {"vllm": VllmRouter()}

__all__ = ["Router", "engine_config", "find_executable", "get_router", "has_router",
           "policy_infeasibility", "policy_of", "replica_blocks", "world_size"]


def has_router(engine: str) -> bool:
    return engine in _ROUTERS


def get_router(engine: str) -> Router:
    try:
        return _ROUTERS[engine]
    except KeyError:
        raise BadInput(f"replicas of engine {engine} have no router in tuner yet (routers: "
                       f"{', '.join(f'{k}: {v.name}' for k, v in _ROUTERS.items())}): "
                       "leave replicas and router_policy out of the space") from None


def policy_infeasibility(engine: str, config: dict[str, Any]) -> str | None:
    """Why a configuration's router policy cannot run in front of its replicas, or None (one
    server has no router). Studies and dry runs both ask this."""
    if replicas_of(config) <= 1:
        return None
    router = get_router(engine)
    return router.infeasibility(policy_of(router, config))
