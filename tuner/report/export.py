"""The winning configuration as files a deploy pipeline runs as-is.

Exports are derived from stored trials alone (the launch plan stored with the trial, see
`stored_plan`), so any past study exports what it measured, whatever the adapters do today. The
JSON record is versioned: a released field is never renamed; new fields may be added with a new
schema_version.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

import tuner
from tuner import DATA_DIR
from tuner.report.export_checks import check_invariants
from tuner.report.portable import launch_script, portable_argv, replicas_launch_script
from tuner.report.stored_plan import deploy_plan, replica_plans
from tuner.serve.engines import LaunchPlan, get_adapter
from tuner.serve.routers import get_router, policy_of
from tuner.spec.errors import BadInput
from tuner.spec.space import replicas_of
from tuner.store import StudyRecord, TrialRecord
from tuner.store.records import LevelMeasurement
from tuner.verdict.cost import study_price, trial_server_hour_usd, usd_per_mtok
from tuner.verdict.rules import best_level, figure, study_sla

# 2 added `confirmation` (the winner's re-run in a fresh server); nothing of 1 changed.
# 3 added the confirmation state `inconclusive`; nothing else changed.
# 4 added objective.tok_s_per_user_p90 and objective.min_tok_s_per_user (a pick from a Pareto
#   front: the level exported, and the target it was picked for); nothing else changed.
# 5 added `price` (the device-hour price the costs rest on), objective.usd_per_mtok, and
#   `usd_per_mtok` in each level of `measurements` and `confirmation.measurements` (USD per
#   million output tokens, tuner.verdict.cost), and `quality` (the trial's answers against the
#   study's reference, its quality gate); nothing else changed.
# 6 added quality.identical, quality.near_ties, quality.diverging, quality.failed and
#   quality.rule (the tie-aware gate: answers by verdict, the rule that judged and why; None
#   for a check stored before it); nothing else changed.
# 7 added objective.source (the run the value comes from: the one that decided the verdict).
# 8 added launch.router: a winner served as replicas behind a router (their count, the router,
#   its policy and command); None for one server; nothing else changed.
SCHEMA_VERSION = 8
GENERIC_FORMATS = ("json", "k8s")  # beside each engine's own format (its name: vllm, trtllm)
SCHEMA_FILE = DATA_DIR / "export.schema.json"
DEPLOY_HOST, DEPLOY_PORT = "0.0.0.0", 8000  # noqa: S104 (a server meant to be reached)
REPLICA_HOST = "127.0.0.1"  # replicas behind a router: only the router faces out


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EngineInfo(_Model):
    name: str
    version: str | None


class HardwareInfo(_Model):
    gpu_type: str
    gpus: int
    description: str | None
    host: str | None


class ObjectiveInfo(_Model):
    """The exported level: the trial's objective level, or (picked for a per-user target) the
    front's fastest level that reaches the target."""

    metric: str
    value: float
    meets_sla: bool
    concurrency: int | None
    tok_s_per_user_p90: float | None
    min_tok_s_per_user: float | None  # the per-user target it was picked for; None: the winner
    # Which run the value comes from (tuner.verdict.rules.figure): "head-to-head",
    # "confirmation" or "first run"; `measurements` and `confirmation` hold both runs.
    source: str
    usd_per_mtok: float | None  # USD per million output tokens at this level; None: no price


class PriceInfo(_Model):
    """What the costs rest on: a device-hour (a GPU, or on `cpu` a core) times the server's
    devices. `example`: the shipped table's example figure, not the spec's
    `hardware.gpu_hour_usd`."""

    usd_per_device_hour: float
    devices: int
    usd_per_server_hour: float
    source: str
    example: bool


class RouterInfo(_Model):
    """Replicas behind a router: `replicas` servers each run `LaunchInfo.command` (replica i
    on the router's port + i, on its own block of the devices), and the router in front."""

    name: str
    policy: str
    replicas: int
    command: list[str]


class LaunchInfo(_Model):
    command: list[str]  # one server's (each replica's, where `router` is set)
    shell: str  # the same command with its environment, for a shell
    env: dict[str, str]
    config_file: str | None  # None where the command line is the whole configuration (SGLang)
    config: dict[str, Any]
    router: RouterInfo | None  # None: one server, no router


class Provenance(_Model):
    tuner_version: str
    study: str
    trial: int
    measured_at: str | None
    exported_at: str


class ConfirmationInfo(_Model):
    """The trial measured again in a fresh server (`tuner confirm`), beside its first run."""

    state: Literal["confirmed", "inconclusive", "differs", "failed"]
    value: float | None  # the objective measured again
    meets_sla: bool | None
    reason: str | None  # why it differs or failed
    measured_at: str | None
    measurements: list[dict[str, Any]]


class QualityInfo(_Model):
    """The trial's answers to the quality gate's prompts against its study's reference (only a
    trial that passed is ever exported)."""

    passed: bool
    prompts: int
    exact_match_rate: float  # 0..1
    common_prefix_share: float  # mean share of each reference answer repeated, 0..1
    mean_common_prefix: float  # tokens
    mean_logprob_divergence: float | None  # nats; None where the engine gave no logprobs
    lossless: str | None  # the lossless feature held to exact match
    task_accuracy: float | None  # of the spec's task checks; None: none
    gate_s: float  # the gate's time on the trial's server
    # Answers by verdict (None: a check stored before the tie-aware gate): identical to the
    # reference's, a near-tie flipped by numerics, or diverging; requests that failed.
    identical: int | None
    near_ties: int | None
    diverging: int | None
    failed: int | None
    rule: str | None  # the rule that judged ("tie-aware", "exact", ...), a colon, why


class ExportRecord(_Model):
    schema_version: Literal[8] = SCHEMA_VERSION
    study: str
    trial: int
    engine: EngineInfo
    model: str
    hardware: HardwareInfo
    parameters: dict[str, Any]
    objective: ObjectiveInfo
    workload: dict[str, Any]
    sla: dict[str, Any]
    measurements: list[dict[str, Any]]  # the first run
    confirmation: ConfirmationInfo | None  # None: never confirmed
    price: PriceInfo | None  # None: no price for the GPU type (set hardware.gpu_hour_usd)
    quality: QualityInfo | None  # None: the study ran without the quality gate
    launch: LaunchInfo
    provenance: Provenance


def _levels(levels: list[LevelMeasurement], server_hour: float | None) -> list[dict[str, Any]]:
    """The stored levels, each with its USD per million output tokens."""
    return [{**m.to_dict(), "usd_per_mtok": usd_per_mtok(server_hour, m.output_tok_s)}
            for m in levels]


def _confirmation(trial: TrialRecord, server_hour: float | None) -> ConfirmationInfo | None:
    if trial.confirm_state is None:
        return None
    return ConfirmationInfo(
        state=trial.confirm_state, value=trial.confirm_objective,
        meets_sla=trial.confirm_meets_sla, reason=trial.confirm_reason,
        measured_at=trial.confirmed_at.isoformat() if trial.confirmed_at else None,
        measurements=_levels(trial.confirmation, server_hour))


def _price(study: StudyRecord, trial: TrialRecord) -> PriceInfo | None:
    price, server_hour = study_price(study), trial_server_hour_usd(study, trial)
    if price is None or server_hour is None:
        return None
    return PriceInfo(usd_per_device_hour=price.usd_per_hour, devices=trial.gpus,
                     usd_per_server_hour=server_hour, source=price.source,
                     example=price.example)


def _quality(trial: TrialRecord) -> QualityInfo | None:
    q = trial.quality
    if q is None:
        return None
    return QualityInfo(passed=q.passed, prompts=q.prompts, exact_match_rate=q.exact_match_rate,
                       common_prefix_share=q.common_prefix_share,
                       mean_common_prefix=q.mean_common_prefix,
                       mean_logprob_divergence=q.mean_logprob_divergence, lossless=q.lossless,
                       task_accuracy=q.task_accuracy, gate_s=q.gate_s, identical=q.identical,
                       near_ties=q.near_ties, diverging=q.diverging, failed=q.failed,
                       rule=q.rule)


def check_quality(trial: TrialRecord) -> None:
    """A trial whose answers failed the quality gate is never exported, whatever is asked."""
    if trial.quality is not None and not trial.quality.passed:
        raise BadInput(f"export of trial {trial.number} refused: it failed the quality gate "
                       f"({trial.quality.reason}): export a trial that passed it (`tuner best` "
                       "names the winner)")


def build_record(study: StudyRecord, trial: TrialRecord, config_dir: str = ".",
                 workdir: str | None = None, pick: Pick | None = None,
                 ) -> tuple[ExportRecord, dict[str, str], list[LaunchPlan]]:
    """The record, the engine's files and the plan of every server it starts (one, or each
    replica's)."""
    adapter = get_adapter(study.engine)
    hw = trial.hardware or {}
    # What the trial ran (its stored plan), not what today's adapter would make of its params.
    served = served_as_replicas(study, trial, workdir)
    plans = served[0] if served else [deploy_plan(study, trial, host=DEPLOY_HOST,
                                                  port=DEPLOY_PORT, workdir=workdir)]
    plan = plans[0]
    # As the spec named the engine and the model, not as the study machine resolved them.
    engine_spec = study.spec.get("engine", {})
    container = bool(engine_spec.get("container"))
    engine = engine_spec.get("executable") or adapter.default_executable
    model = (study.spec.get("model") or {}).get("path") or study.model
    command = adapter.launch_command(plan, config_dir)
    if not container:
        command = portable_argv(command, engine=engine, resolved_model=study.model, model=model)
    import yaml

    config_file, config_text = next(iter(plan.files.items()), (None, "{}"))
    # The level of the figure that decided the verdict (`rules.figure`), unless a per-user
    # target picked another.
    shown = figure(trial, study)
    best = pick.level if pick is not None else best_level(shown.levels, study_sla(study))[0]
    server_hour = trial_server_hour_usd(study, trial)
    spec = study.spec
    return ExportRecord(
        study=study.name, trial=trial.number,
        engine=EngineInfo(name=study.engine, version=trial.engine_version),
        model=model,
        hardware=HardwareInfo(gpu_type=study.gpu_type, gpus=trial.gpus or 1,
                              description=hw.get("description"), host=hw.get("host")),
        parameters=trial.params,
        objective=ObjectiveInfo(
            metric=spec["objective"]["metric"],
            value=best.output_tok_s_per_gpu if pick is not None else shown.value,
            source="first run" if pick is not None else shown.source,
            meets_sla=best.meets_sla if pick is not None else bool(trial.meets_sla),
            concurrency=best.concurrency if best else None,
            tok_s_per_user_p90=best.tok_s_per_user_p90 if best else None,
            min_tok_s_per_user=pick.min_tok_s_per_user if pick is not None else None,
            usd_per_mtok=usd_per_mtok(server_hour, best.output_tok_s) if best else None),
        workload=spec["workload"], sla=spec["sla"],
        measurements=_levels(trial.measurements, server_hour),
        confirmation=_confirmation(trial, server_hour), price=_price(study, trial),
        quality=_quality(trial),
        launch=LaunchInfo(command=command, shell=shell_command(command, plan.env), env=plan.env,
                          config_file=config_file, config=yaml.safe_load(config_text),
                          router=served[1] if served else None),
        provenance=Provenance(
            tuner_version=tuner.__version__, study=study.name, trial=trial.number,
            measured_at=trial.finished_at.isoformat() if trial.finished_at else None,
            exported_at=datetime.now(timezone.utc).isoformat(),
        ),
    ), plan.files, plans


def served_as_replicas(study: StudyRecord, trial: TrialRecord, workdir: str | None
                       ) -> tuple[list[LaunchPlan], RouterInfo] | None:
    """A trial of replicas as a deploy serves it: each replica's plan (on this host's port
    DEPLOY_PORT + i, where only the router reaches it) and the router in front on DEPLOY_PORT;
    None for a trial of one server."""
    n = replicas_of(trial.params)
    if n <= 1:
        return None
    router = get_router(study.engine)
    plans = replica_plans(study, trial, host=REPLICA_HOST,
                          ports=[DEPLOY_PORT + i for i in range(1, n + 1)], workdir=workdir)
    policy = policy_of(router, trial.params)
    command = router.deploy_command([p.base_url for p in plans], policy,
                                    executable=router.default_executable, host=DEPLOY_HOST,
                                    port=DEPLOY_PORT)
    return plans, RouterInfo(name=router.name, policy=policy, replicas=n, command=command)


def shell_command(argv: list[str], env: dict[str, str], prefix: str = "") -> str:
    """The command with its environment as shell words (`prefix` goes before the assignments)."""
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (prefix + assigns + " " if assigns else "") + shlex.join(argv)


@dataclass(frozen=True)
class Pick:
    """A level picked from a Pareto front for a per-user target (`rules.pick_for_user`)."""

    level: LevelMeasurement
    min_tok_s_per_user: float


def write_export(study: StudyRecord, trial: TrialRecord, out_dir: Path,
                 formats: tuple[str, ...] | None = None, pick: Pick | None = None,
                 router_image: str | None = None) -> list[Path]:
    """Write the chosen formats into out_dir (the trial's objective level, or the level
    `pick` names); returns the files written. `router_image`: the router's container image,
    which the Kubernetes manifests of a trial of replicas need."""
    formats = formats or default_formats(study)
    allowed = (study.engine, *GENERIC_FORMATS)
    for f in formats:
        if f not in allowed:
            raise BadInput(f"--format {f}: study {study.name} used engine {study.engine}; "
                           f"use one of {', '.join(allowed)}")
    check_quality(trial)
    record, files, plans = build_record(study, trial, workdir=str(out_dir.resolve()), pick=pick)
    plan = plans[0]
    check_invariants(record, get_adapter(study.engine))
    router = record.launch.router
    if router is not None and study.spec.get("engine", {}).get("container"):
        raise BadInput(f"export of trial {trial.number} refused: it is {router.replicas} replicas "
                       f"behind {router.name}, which tuner does not export as a container's "
                       f"command yet: use --format json, or --format k8s with --router-image")
    if router is not None and "k8s" in formats and not router_image:
        raise BadInput(f"--format k8s of trial {trial.number} needs --router-image: it is "
                       f"{router.replicas} replicas behind {router.name}, whose pod needs an "
                       f"image with {router.name} installed (e.g. one built FROM python:3.11-slim "
                       f"with `pip install {router.name}==0.1.17`)")
    k8s_text = _k8s(study, trial, record, files, plan, router_image) if "k8s" in formats \
        else None
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if study.engine in formats:
        for name, content in files.items():
            written.append(_write(out_dir / name, content))
        header = (f"# tuner {tuner.__version__}: study {study.name}, trial {trial.number}, "
                  f"{record.objective.value:,.0f} {record.objective.metric} "
                  f"({record.objective.source})")
        if router is not None:
            script = _replicas_script(study, record, plans, header)
        elif study.spec.get("engine", {}).get("container"):
            script = (
                f"#!/usr/bin/env bash\n{header}\nset -euo pipefail\n"
                'cd "$(dirname "$0")"\n'
                f"exec {shell_command(record.launch.command, record.launch.env, prefix='env ')} "
                '"$@"\n'
            )
        else:
            script = launch_script(record.launch.command, record.launch.env,
                                   engine=record.launch.command[0], model=record.model,
                                   header=header)
        path = _write(out_dir / "launch.sh", script)
        path.chmod(0o755)
        written.append(path)
    if "json" in formats:
        written.append(_write(out_dir / "best.json", record.model_dump_json(indent=2) + "\n"))
    if k8s_text is not None:
        written.append(_write(out_dir / "k8s.yaml", k8s_text))
    return written


def _replicas_script(study: StudyRecord, record: ExportRecord, plans: list[LaunchPlan],
                     header: str) -> str:
    """launch.sh of a trial of replicas: each replica's portable command, then the router."""
    adapter = get_adapter(study.engine)
    engine = record.launch.command[0]
    replicas = [(portable_argv(adapter.launch_command(p, "."), engine=engine,
                               resolved_model=study.model, model=record.model), p.env)
                for p in plans]
    return replicas_launch_script(replicas, record.launch.router.command, engine=engine,
                                  model=record.model, router_name=record.launch.router.name,
                                  host=REPLICA_HOST, port=DEPLOY_PORT, header=header)


def default_formats(study: StudyRecord) -> tuple[str, ...]:
    return (study.engine, "json")


def _k8s(study: StudyRecord, trial: TrialRecord, record: ExportRecord, files: dict[str, str],
         plan: LaunchPlan, router_image: str | None = None) -> str:
    from tuner.report import k8s

    container = study.spec.get("engine", {}).get("container")
    try:
        image = k8s.image_for(study.engine, record.engine.version, container)
    except ValueError as e:
        raise BadInput(f"--format k8s: {e}") from e
    adapter = get_adapter(study.engine)
    router = record.launch.router
    if router is not None:
        # Each replica in a pod of its own, on the pod's port (not the launch script's own
        # port per replica); the router reaches them by their pods' names.
        plan = replica_plans(study, trial, host=DEPLOY_HOST,
                             ports=[k8s.PORT] * router.replicas, workdir=None)[0]
    command = adapter.engine_command(plan, k8s.CONFIG_DIR)  # inside the image: no docker
    if router is not None:
        workers = k8s.replica_names(study.name, record.trial, router.replicas)
        router_command = get_router(study.engine).deploy_command(
            workers, router.policy, executable=router.command[0], host=DEPLOY_HOST,
            port=k8s.PORT)
        return k8s.dump(k8s.replica_manifests(
            study=study.name, trial=record.trial, engine=study.engine,
            gpu_type=study.gpu_type, gpus=plan.gpus, replicas=router.replicas,
            command=command, env=record.launch.env, files=files, image=image,
            health_path=plan.health_path, model=plan.model, router=router.name,
            router_command=router_command, router_image=router_image))
    return k8s.dump(k8s.manifests(
        study=study.name, trial=record.trial, engine=study.engine, gpu_type=study.gpu_type,
        gpus=record.hardware.gpus, command=command, env=record.launch.env, files=files,
        image=image, health_path=plan.health_path, model=plan.model))


def _write(path: Path, content: str) -> Path:
    # Write to a temporary name and rename, so a reader never sees half a file.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(content)
    os.replace(tmp, path)
    return path


def json_schema() -> dict[str, Any]:
    """The export record's JSON Schema (shipped as tuner/data/export.schema.json)."""
    schema = ExportRecord.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://tuner.invalid/export-v{SCHEMA_VERSION}.schema.json"
    return schema


if __name__ == "__main__":  # regenerate the shipped schema: python -m tuner.report.export
    SCHEMA_FILE.write_text(json.dumps(json_schema(), indent=2) + "\n")


WORKERS_FORMAT = "k8s-workers"


def write_workers_job(study: StudyRecord, out_dir: Path, *, workers: int, image: str | None,
                      secret: str) -> Path:
    """`k8s-workers.yaml`: a Job of N `tuner worker` pods on the shared study. It needs no
    finished trial; the storage URL stays in the Secret it names."""
    from tuner.report import k8s

    if not image:
        raise BadInput(f"--format {WORKERS_FORMAT} needs --image: a container image with tuner "
                       f"and {study.engine} installed, and the study's model at "
                       f"{study.spec['model']['path']} (or a spec that generates it)")
    job = k8s.workers_job(study=study.name, workers=workers, image=image,
                          gpu_type=study.gpu_type, devices=study.spec["hardware"].get("devices"),
                          secret=secret, model=study.spec.get("model", {}).get("path"))
    out_dir.mkdir(parents=True, exist_ok=True)
    return _write(out_dir / "k8s-workers.yaml", k8s.secret_howto(secret) + k8s.dump([job]))
