"""A configuration's deployment parameters (`replicas`, `router_policy`), which no engine flag
carries: what one replica's engine runs, and the ranks of all its replicas. Pure, so that what
reads configurations (feasibility, exports, the dashboard's data) need not reach the launcher."""

from __future__ import annotations

from typing import Any

from tuner.serve.engines.base import EngineAdapter
from tuner.spec.space import DEPLOYMENT_PARAMETERS, replicas_of


def engine_config(config: dict[str, Any]) -> dict[str, Any]:
    """The configuration one replica's engine runs: without the deployment parameters."""
    return {k: v for k, v in config.items() if k not in DEPLOYMENT_PARAMETERS}


def world_size(adapter: EngineAdapter, config: dict[str, Any]) -> int:
    """The ranks a configuration occupies over all its replicas (one server: its own)."""
    return adapter.world_size(engine_config(config)) * replicas_of(config)
