"""The winning configuration as files a deploy pipeline runs as-is.

Exports are derived from stored trials alone (the stored spec and the trial's parameters), so any
past study can be exported again later. The JSON record is versioned: a released field is never
renamed; new fields may be added with a new schema_version.
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

import tuner
from tuner.engines import EngineSettings, get_adapter
from tuner.errors import BadInput, NoResult
from tuner.hardware import Inventory
from tuner.store import StudyRecord, TrialRecord

SCHEMA_VERSION = 1
FORMATS = ("vllm", "json")
DEPLOY_HOST, DEPLOY_PORT = "0.0.0.0", 8000  # noqa: S104 (a server meant to be reached)


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
    metric: str
    value: float
    meets_sla: bool
    concurrency: int | None


class LaunchInfo(_Model):
    command: list[str]
    shell: str  # the same command with its environment, for a shell
    env: dict[str, str]
    config_file: str
    config: dict[str, Any]


class Provenance(_Model):
    tuner_version: str
    study: str
    trial: int
    measured_at: str | None
    exported_at: str


class ExportRecord(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    study: str
    trial: int
    engine: EngineInfo
    model: str
    hardware: HardwareInfo
    parameters: dict[str, Any]
    objective: ObjectiveInfo
    workload: dict[str, Any]
    sla: dict[str, Any]
    measurements: list[dict[str, Any]]
    launch: LaunchInfo
    provenance: Provenance


def best_trial(study: StudyRecord, trials: list[TrialRecord]) -> TrialRecord:
    """The complete trial with the highest objective among those that met the SLA."""
    ok = [t for t in trials if t.state == "complete" and t.meets_sla and t.objective is not None]
    if not ok:
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.state] = counts.get(t.state, 0) + 1
        seen = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no trials"
        raise NoResult(
            f"study {study.name} has no trial that met the SLA ({seen}): relax the spec's sla, "
            "widen the search space or run more trials; `tuner status` lists them"
        )
    return max(ok, key=lambda t: t.objective)


def _settings(study: StudyRecord) -> EngineSettings:
    engine = study.spec["engine"]
    return EngineSettings(executable=engine.get("executable", study.engine), model=study.model,
                          args=dict(engine.get("args", {})), env=dict(engine.get("env", {})))


def build_record(study: StudyRecord, trial: TrialRecord, config_dir: str = ".") -> ExportRecord:
    adapter = get_adapter(study.engine)
    hw = trial.hardware or {}
    inventory = Inventory(kind=hw.get("kind", "cpu"), type=study.gpu_type,
                          devices=tuple(range(trial.gpus or 1)),
                          description=hw.get("description", ""), host=hw.get("host", ""))
    plan = adapter.launch_plan(trial.params, _settings(study), host=DEPLOY_HOST,
                               port=DEPLOY_PORT, inventory=inventory,
                               devices=list(range(trial.gpus or 1)))
    command = adapter.launch_command(plan, config_dir)
    import yaml

    (config_file, config_text), = plan.files.items()
    best = max((m for m in trial.measurements if m.meets_sla),
               key=lambda m: m.output_tok_s_per_gpu, default=None)
    spec = study.spec
    return ExportRecord(
        study=study.name, trial=trial.number,
        engine=EngineInfo(name=study.engine, version=trial.engine_version),
        model=study.model,
        hardware=HardwareInfo(gpu_type=study.gpu_type, gpus=trial.gpus or 1,
                              description=hw.get("description"), host=hw.get("host")),
        parameters=trial.params,
        objective=ObjectiveInfo(metric=spec["objective"]["metric"], value=trial.objective,
                                meets_sla=bool(trial.meets_sla),
                                concurrency=best.concurrency if best else None),
        workload=spec["workload"], sla=spec["sla"],
        measurements=[m.to_dict() for m in trial.measurements],
        launch=LaunchInfo(command=command, shell=shell_command(command, plan.env), env=plan.env,
                          config_file=config_file, config=yaml.safe_load(config_text)),
        provenance=Provenance(
            tuner_version=tuner.__version__, study=study.name, trial=trial.number,
            measured_at=trial.finished_at.isoformat() if trial.finished_at else None,
            exported_at=datetime.now(timezone.utc).isoformat(),
        ),
    ), plan.files


def shell_command(argv: list[str], env: dict[str, str], prefix: str = "") -> str:
    """The command with its environment as shell words (`prefix` goes before the assignments)."""
    assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (prefix + assigns + " " if assigns else "") + shlex.join(argv)


def write_export(study: StudyRecord, trial: TrialRecord, out_dir: Path,
                 formats: tuple[str, ...] = FORMATS) -> list[Path]:
    """Write the chosen formats into out_dir; returns the files written."""
    for f in formats:
        if f not in FORMATS:
            raise BadInput(f"--format {f}: use one of {', '.join(FORMATS)}")
        if f in ("vllm",) and study.engine != f:
            raise BadInput(f"--format {f}: study {study.name} used engine {study.engine}")
    record, files = build_record(study, trial)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if "vllm" in formats:
        for name, content in files.items():
            written.append(_write(out_dir / name, content))
        script = (
            "#!/usr/bin/env bash\n"
            f"# tuner {tuner.__version__}: study {study.name}, trial {trial.number}, "
            f"{record.objective.value:,.0f} {record.objective.metric}\n"
            "set -euo pipefail\n"
            'cd "$(dirname "$0")"\n'
            f"exec {shell_command(record.launch.command, record.launch.env, prefix='env ')} "
            '"$@"\n'
        )
        path = _write(out_dir / "launch.sh", script)
        path.chmod(0o755)
        written.append(path)
    if "json" in formats:
        written.append(_write(out_dir / "best.json", record.model_dump_json(indent=2) + "\n"))
    return written


def _write(path: Path, content: str) -> Path:
    # Write to a temporary name and rename, so a reader never sees half a file.
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(content)
    os.replace(tmp, path)
    return path


def json_schema() -> dict[str, Any]:
    return ExportRecord.model_json_schema()
