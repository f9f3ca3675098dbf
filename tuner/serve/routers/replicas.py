"""Laying a configuration out as replicas behind a router: each replica's devices, its launch
plan (the engine adapter's, as for one server) and its server, then the router in front.

`replicas` and `router_policy` are deployment parameters: no engine flag carries them, so they
are taken off the configuration an engine adapter sees (`engine_config`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner.serve.cpu_layout import CpuLayout, plan_layout
from tuner.serve.engines.base import EngineAdapter, EngineSettings, LaunchPlan
from tuner.serve.hardware import Inventory
from tuner.serve.launcher import ServerProcess, free_port
from tuner.serve.routers.base import Router, find_executable
from tuner.serve.routers.configs import engine_config, policy_of, replica_blocks
from tuner.serve.routers.deployment import Deployment
from tuner.spec.errors import BadInput
from tuner.spec.space import replicas_of


def deployment(adapter: EngineAdapter, router: Router, config: dict[str, Any],
               settings: EngineSettings, *, host: str, inventory: Inventory,
               devices: list[int], workdir: Path, ready_timeout_s: float) -> Deployment:
    """The (not yet started) replicas of `config` on consecutive blocks of `devices`, each
    logging under workdir/replica-N, and the router in front of them under workdir/router.

    On a CPU node the replicas' ranks take the slot's first cores and every frontend, the
    router and the load generator the cores left (or share the ranks' where none is left), as
    one server's do (tuner.serve.cpu_layout)."""
    n = replicas_of(config)
    inner = engine_config(config)
    world = adapter.world_size(inner)
    executable = find_executable(router.default_executable)
    if executable is None:
        raise BadInput(f"replicas need the router {router.name}, which is not installed here: "
                       "install tuner's `router` extra (`make install` does)")
    whole = None
    if inventory.kind == "cpu":
        whole = plan_layout(devices, n * world, inventory.per_rank)
    plans, servers = [], []
    for i, own in enumerate(replica_blocks(devices, n, world * inventory.per_rank)):
        layout = None
        if whole is not None:
            ranks = whole.ranks[i * world:(i + 1) * world]
            layout = CpuLayout(ranks, whole.frontend, whole.client)
            if not adapter.compute_apart(inner, settings):  # compute in the frontend's process
                layout = plan_layout([c for r in ranks for c in r], world, inventory.per_rank)
            own = [*layout.compute, *(c for c in layout.frontend if c not in layout.compute)]
        where = workdir / f"replica-{i + 1}"
        plan = adapter.launch_plan(inner, settings, host=host, port=free_port(host),
                                   inventory=inventory, devices=own,
                                   workdir=str(where.resolve()))
        if layout is not None:
            plan.extra = {**plan.extra, "cpu_layout": layout.to_dict()}
        plans.append(plan)
        servers.append(ServerProcess(plan, where, cpus=layout.slot if layout else None,
                                     layout=layout))
    front = router.launch_plan([p.base_url for p in plans], policy_of(router, config),
                               executable=executable,
                               host=host, port=free_port(host), metrics_port=free_port(host),
                               model=plans[0].model, ready_timeout_s=ready_timeout_s)
    router_server = ServerProcess(front, workdir / "router",
                                  cpus=whole.frontend if whole is not None else None)
    return Deployment(served_plan(plans, front, whole), servers, router_server, whole)


def served_plan(replicas: list[LaunchPlan], router: LaunchPlan,
                layout: CpuLayout | None) -> LaunchPlan:
    """The plan a deployment is measured and recorded under: the first replica's engine
    command and files (every replica runs the same), at the router's address, over the devices
    of all replicas; each replica's plan and the router's are kept in `extra`."""
    extra: dict[str, Any] = {"replicas": [p.to_dict() for p in replicas],
                             "router": router.to_dict()}
    if layout is not None:
        extra["cpu_layout"] = layout.to_dict()
    return replace(replicas[0], host=router.host, port=router.port,
                   gpus=sum(p.gpus for p in replicas), extra=extra)
