"""The launch plan an export writes: the one stored with the trial, moved to where a deploy
serves it.

A trial stores the plan it ran with (`launch_plan`: argv, environment, files). Exporting from it
means a past study exports the configuration it measured, whatever the adapters produce today.
Only where the server listens changes: host and port become the deploy's, a trial's device ids
(`CUDA_VISIBLE_DEVICES`, a container's `--gpus`) become 0..N-1 of the deploy's node, a CPU
trial's core binding (the adapter's `slot_env`) is left out, and a container's mount of the
trial's folder becomes the export folder. A trial recorded before plans
were stored (no `launch_plan`) is planned again through the adapter, as older tuners did.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from tuner.serve.engines import EngineSettings, LaunchPlan, get_adapter
from tuner.serve.hardware import Inventory
from tuner.serve.routers import engine_config, replica_blocks
from tuner.spec.space import replicas_of
from tuner.store import StudyRecord, TrialRecord

__all__ = ["deploy_plan"]

_PLAN_FIELDS = frozenset(f.name for f in fields(LaunchPlan))


def deploy_plan(study: StudyRecord, trial: TrialRecord, *, host: str, port: int,
                workdir: str | None) -> LaunchPlan:
    """The trial's stored plan served at host:port on devices 0..N-1, its files in `workdir`."""
    gpus = trial.gpus or 1
    if not trial.launch_plan:
        plan = _planned_again(study, trial, host=host, port=port, gpus=gpus, workdir=workdir)
    else:
        stored = LaunchPlan(**{k: v for k, v in trial.launch_plan.items() if k in _PLAN_FIELDS})
        ran_in = str(Path(trial.log_path).parent) if trial.log_path else None
        argv = _moved_argv(stored, host=host, port=port, gpus=gpus, ran_in=ran_in,
                           workdir=workdir)
        env = dict(stored.env)
        if "CUDA_VISIBLE_DEVICES" in env:
            env["CUDA_VISIBLE_DEVICES"] = _devices(gpus)
        plan = replace(stored, argv=argv, env=env, files=dict(stored.files), host=host,
                       port=port)
    slot_env = get_adapter(study.engine).slot_env
    return replace(plan, env={k: v for k, v in plan.env.items() if k not in slot_env},
                   extra={k: v for k, v in plan.extra.items() if k != "cpu_layout"})


def replica_plans(study: StudyRecord, trial: TrialRecord, *, host: str, ports: list[int],
                  workdir: str | None) -> list[LaunchPlan]:
    """A replicas trial's servers as a deploy runs them, one per port: the stored engine
    command (every replica runs the same), replica i on the i-th block of devices 0..N-1."""
    n = len(ports)
    per = max(1, (trial.gpus or n) // n)
    plans = []
    for port, block in zip(ports, replica_blocks(list(range(per * n)), n, per), strict=True):
        plan = deploy_plan(study, trial, host=host, port=port, workdir=workdir)
        env = dict(plan.env)
        if "CUDA_VISIBLE_DEVICES" in env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, block))
        plans.append(replace(plan, env=env, gpus=per))
    return plans


def _moved_argv(plan: LaunchPlan, *, host: str, port: int, gpus: int, ran_in: str | None,
                workdir: str | None) -> list[str]:
    """The stored argv with only its serving address, devices and mount changed."""
    out: list[str] = []
    previous = None
    for arg in plan.argv:
        if previous == "--host" and arg == plan.host:
            arg = host
        elif previous == "--port" and arg == str(plan.port):
            arg = str(port)
        elif previous == "-p" and arg == f"{plan.port}:{plan.port}":
            arg = f"{port}:{port}"
        elif previous == "--name" and arg.endswith(f"-{plan.port}"):
            arg = arg[: -len(str(plan.port))] + str(port)
        elif previous == "--gpus" and arg.startswith('"device='):
            arg = f'"device={_devices(gpus)}"'
        elif previous == "-v" and ran_in and workdir and arg.startswith(ran_in + ":"):
            arg = workdir + arg[len(ran_in):]
        out.append(arg)
        previous = arg
    return out


def _devices(gpus: int) -> str:
    return ",".join(map(str, range(gpus)))


def _planned_again(study: StudyRecord, trial: TrialRecord, *, host: str, port: int, gpus: int,
                   workdir: str | None) -> LaunchPlan:
    hw = trial.hardware or {}
    # One server's plan: of a trial of replicas, one replica's (its share of the devices).
    gpus = max(1, gpus // replicas_of(trial.params))
    inventory = Inventory(kind=hw.get("kind", "cpu"), type=study.gpu_type,
                          devices=tuple(range(gpus)), description=hw.get("description", ""),
                          host=hw.get("host", ""), per_rank=hw.get("per_rank", 1))
    return get_adapter(study.engine).launch_plan(
        engine_config(trial.params), _settings(study), host=host, port=port,
        inventory=inventory, devices=list(range(gpus)), workdir=workdir)


def _settings(study: StudyRecord) -> EngineSettings:
    engine: dict[str, Any] = study.spec["engine"]
    executable = engine.get("executable") or get_adapter(study.engine).default_executable
    return EngineSettings(executable=executable, model=study.model,
                          args=dict(engine.get("args", {})), env=dict(engine.get("env", {})),
                          draft_model=engine.get("draft_model"), container=engine.get("container"))
