"""Serving a configuration: its launch plan and its (not yet started) server on the devices it
was given, laid out on a CPU node as a deployment lays it out (tuner.serve.cpu_layout). Trials,
the quality gate's reference, confirmations and the head-to-head all get their servers here."""

from __future__ import annotations

from typing import Any

from tuner.search.context import HOST, StudyContext
from tuner.search.recovery import this_process
from tuner.serve.cpu_layout import plan_layout
from tuner.serve.engines import LaunchPlan
from tuner.serve.launcher import ServerProcess, free_port


def server_for(ctx: StudyContext, params: dict[str, Any], devices: list[int],
               run_name: str) -> tuple[LaunchPlan, ServerProcess]:
    """The launch plan of a configuration on its devices, and its (not yet started) server,
    which logs under runs_dir/run_name."""
    port = ctx.spec.engine.port or free_port(HOST)
    workdir = ctx.runs_dir / run_name
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


def start_recorded(ctx: StudyContext, server: ServerProcess, trial_id: int) -> None:
    """Start the server and record it with the tuner process that owns it (a confirmation's or
    head-to-head's server is its own process's), so a later run reaps it if that process dies."""
    server.start()
    owner_pid, owner_created = this_process()
    ctx.store.record_server(trial_id, host=ctx.inventory.host, pid=server.pid, pgid=server.pid,
                            create_time=server.create_time or 0.0,
                            log_path=str(server.log_path), owner_pid=owner_pid,
                            owner_create_time=owner_created)
