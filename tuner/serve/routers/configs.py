"""A configuration's deployment parameters (`replicas`, `router_policy`), which no engine flag
carries: what one replica's engine runs, the ranks of all its replicas, each replica's devices
and the router's policy. Pure, so that what reads configurations (feasibility, dry runs,
exports, the dashboard's data) need not reach the launcher."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.serve.engines.base import EngineAdapter
from tuner.spec.space import DEPLOYMENT_PARAMETERS, replicas_of

if TYPE_CHECKING:
    from tuner.serve.routers.base import Router


def engine_config(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration one replica's engine runs: without the deployment parameters."""
    return {k: v for k, v in config.items() if k not in DEPLOYMENT_PARAMETERS}


def world_size(adapter: EngineAdapter, config: dict[str, Any]) -> int:
    """The ranks a configuration occupies over all its replicas (one server: its own)."""
    return adapter.world_size(engine_config(config)) * replicas_of(config)


def replica_blocks(devices: list[int], replicas: int, per_replica: int) -> list[list[int]]:
    """Each replica's devices: consecutive blocks of `per_replica` from the start of `devices`."""
    return [devices[i * per_replica:(i + 1) * per_replica] for i in range(replicas)]


def policy_of(router: Router, config: dict[str, Any]) -> str:
    """The policy the router runs for a configuration: its `router_policy`, else the router's
    own default, named (it is always passed)."""
    return str(config.get("router_policy", router.default_policy))
