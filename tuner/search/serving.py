"""Serving a configuration: its launch plan and its (not yet started) server on the devices it
was given, laid out on a CPU node as a deployment lays it out (tuner.serve.cpu_layout). Trials,
the quality gate's reference, confirmations and the head-to-head all get their servers here.

A configuration with `replicas` > 1 is served as that many servers on disjoint devices behind
a router (tuner.serve.routers): the plan handed back is the router's address, so the load
generator talks to the router only, and the server is the whole deployment, started, watched
and stopped as one."""

from __future__ import annotations

from typing import Any

from tuner.search.context import HOST, StudyContext
from tuner.search.recovery import this_process
from tuner.serve.cpu_layout import plan_layout
from tuner.serve.engines import LaunchPlan
from tuner.serve.launcher import ServerProcess, free_port
from tuner.serve.routers import get_router
from tuner.serve.routers.deployment import Deployment
from tuner.serve.routers.replicas import deployment
from tuner.spec.space import replicas_of

Served = ServerProcess | Deployment


def server_for(ctx: StudyContext, params: dict[str, Any], devices: list[int],
               run_name: str) -> tuple[LaunchPlan, Served]:
    """The launch plan of a configuration on its devices, and its (not yet started) server,
    which logs under runs_dir/run_name; with replicas, the deployment of replicas and router."""
    workdir = ctx.runs_dir / run_name
    if replicas_of(params) > 1:
        served = deployment(ctx.adapter, get_router(ctx.adapter.name), params, ctx.settings,
                            host=HOST, inventory=ctx.inventory, devices=devices,
                            workdir=workdir, ready_timeout_s=ctx.spec.engine.ready_timeout_s)
        return served.plan, served
    port = ctx.spec.engine.port or free_port(HOST)
    plan = ctx.adapter.launch_plan(params, ctx.settings, host=HOST, port=port,
                                   inventory=ctx.inventory, devices=devices,
                                   workdir=str(workdir.resolve()))
    if ctx.inventory.kind != "cpu":
        return plan, ServerProcess(plan, workdir)
    # On a CPU node the devices are cores: the ranks take the slot's first, the frontend and
    # the load generator the rest (tuner.serve.cpu_layout); the server is held to them.
    world = ctx.adapter.world_size(params)
    layout = plan_layout(devices, world, ctx.inventory.per_rank)
    if not ctx.adapter.compute_apart(params, ctx.settings):  # compute in the frontend's process
        layout = plan_layout(layout.compute, world, ctx.inventory.per_rank)
    plan.extra = {**plan.extra, "cpu_layout": layout.to_dict()}
    return plan, ServerProcess(plan, workdir, cpus=layout.slot, layout=layout)


def start_recorded(ctx: StudyContext, server: Served, trial_id: int) -> None:
    """Start the server and record it with the tuner process that owns it (a confirmation's or
    head-to-head's server is its own process's), so a later run reaps it if that process dies;
    a deployment's replicas and router each as a server of their own."""
    server.start()
    owner_pid, owner_created = this_process()
    members = server.members() if isinstance(server, Deployment) else [server]
    for member in members:
        ctx.store.record_server(trial_id, host=ctx.inventory.host, pid=member.pid,
                                pgid=member.pid, create_time=member.create_time or 0.0,
                                log_path=str(member.log_path), owner_pid=owner_pid,
                                owner_create_time=owner_created)


def metrics_urls(plan: LaunchPlan) -> list[str]:
    """Where the engine's own /metrics are read: each replica's (a router shows none of
    theirs), else the server's."""
    replicas = plan.extra.get("replicas")
    if not replicas:
        return [plan.base_url]
    return [f"http://{r['host']}:{r['port']}" for r in replicas]
