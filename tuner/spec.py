"""The study spec: what to tune, on what, under which workload, objective, SLA and budget.

A spec is a YAML file that names a search space and adds everything else. Unknown fields are
errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.records import SLA
from tuner.yamlio import load_model, read_yaml

DEFAULT_STORAGE = "sqlite:///tuner.db"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(_Strict):
    path: str = Field(description="Local model directory (or a name the engine resolves itself).")
    generate: Literal["tiny-gpt-oss"] | None = Field(
        None, description="Generate this model at `path` when it is missing (random weights)."
    )
    seed: int = Field(0, description="Seed of the generated model.")
    shape: str | None = Field(
        None, description="A model shape in tuner/data/models.yaml (e.g. gpt-oss-120b), used "
        "when the checkpoint is not on this machine (dry runs, plans)."
    )


class ContainerSpec(_Strict):
    """Run the engine inside a container (how most users get TensorRT-LLM)."""

    runtime: str = Field("docker", description="docker or podman.")
    image: str = Field(description="e.g. nvcr.io/nvidia/tensorrt-llm/release:<tag>")
    args: list[str] = Field(default_factory=list, description="Extra `run` arguments.")


class EngineSpec(_Strict):
    name: str = Field(description="Engine adapter: vllm.")
    executable: str | None = Field(
        None, description="The engine's command, on PATH or a path (default: vllm, trtllm-serve)."
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Fixed engine options for every trial, keyed as in the engine's config file "
        "(vLLM: long flag names, e.g. max-model-len).",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    ready_timeout_s: float = Field(300, gt=0, description="How long a server may take to be ready.")
    port: int | None = Field(None, ge=1, le=65535, description="Fixed port; default: a free one.")
    draft_model: str | None = Field(
        None, description="Draft model for EAGLE-3 speculative decoding (path or name)."
    )
    container: ContainerSpec | None = Field(None, description="Run the engine in a container.")


class HardwareSpec(_Strict):
    gpu_type: str = Field(description="The accelerator type the study is for; `cpu` on a CPU node.")
    devices: int | None = Field(
        None, gt=0, description="Devices a trial may use (GPUs, or CPU cores); default: all found."
    )


class WorkloadSpec(_Strict):
    prompt_source: Literal["synthetic", "corpus"] = Field(
        "synthetic", description="synthetic: random token ids; corpus: natural text shipped with "
        "tuner, tokenized by the served model's tokenizer (speculative decoding needs it)."
    )
    input_len: int = Field(gt=0, description="Prompt length in tokens.")
    output_len: int = Field(gt=0, description="Generated tokens per request.")
    concurrency: list[int] = Field(min_length=1, description="Concurrency levels of the sweep.")
    requests_per_level: int = Field(gt=0, description="Timed requests at each level.")
    warmup_requests: int = Field(4, ge=0, description="Untimed requests before each level.")
    request_timeout_s: float = Field(120, gt=0)
    seed: int = 0

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if any(c <= 0 for c in v):
            raise ValueError("concurrency levels must be positive integers")
        if len(set(v)) != len(v):
            raise ValueError("concurrency levels must be distinct")
        return sorted(v)


class SLASpec(_Strict):
    ttft_p90_ms: float | None = Field(None, gt=0, description="p90 time to first token, at most.")
    min_tok_s_per_user_p90: float | None = Field(
        None, gt=0, description="Per-user decode speed that 90% of requests reach, at least."
    )

    def to_sla(self) -> SLA:
        return SLA(self.ttft_p90_ms, self.min_tok_s_per_user_p90)


class ObjectiveSpec(_Strict):
    metric: Literal["output_tok_s_per_gpu"] = "output_tok_s_per_gpu"


class SamplerSpec(_Strict):
    name: Literal["tpe", "random"] = "tpe"
    seed: int | None = 0
    n_startup_trials: int = Field(3, ge=1, description="Random trials before TPE models the space.")


class BudgetSpec(_Strict):
    n_trials: int = Field(gt=0, description="Trials that launch a server, for the whole study.")
    timeout_min: float | None = Field(None, gt=0, description="Start no trial after this long.")
    trial_timeout_s: float = Field(600, gt=0, description="Ready wait plus the whole sweep.")
    parallel_trials: int = Field(
        1, ge=1, description="Trials run at the same time, each on its own devices (e.g. two "
        "TP4 trials on an 8-GPU node)."
    )
    # Several workers on one study (`tuner worker`): a worker that stops beating for the grace
    # period is presumed dead, its trial failed and retried once by whichever worker notices.
    heartbeat_interval_s: int = Field(
        30, ge=1, description="How often a running trial's worker records that it is alive."
    )
    heartbeat_grace_s: int = Field(
        120, ge=1, description="Silence after which another worker fails the trial and retries "
        "it; several intervals, so a busy worker is not taken for dead."
    )

    @model_validator(mode="after")
    def _grace_outlasts_beats(self) -> BudgetSpec:
        if self.heartbeat_grace_s <= self.heartbeat_interval_s:
            raise ValueError("heartbeat_grace_s must be longer than heartbeat_interval_s")
        return self


class StudySpec(_Strict):
    name: str = Field(min_length=1, description="Study name: re-running the same name resumes it.")
    search_space: str = Field(description="A name in search_spaces/ or a path to a space YAML.")
    model: ModelSpec
    engine: EngineSpec
    hardware: HardwareSpec
    workload: WorkloadSpec
    sla: SLASpec = Field(default_factory=SLASpec)
    objective: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    budget: BudgetSpec
    storage: str | None = Field(None, description=f"Database URL; default {DEFAULT_STORAGE}.")
    runs_dir: str = Field("tuner-runs", description="Where trial logs and files are written.")


def load_spec(path: Path) -> StudySpec:
    return load_model(StudySpec, read_yaml(path, "study spec"), str(path))


def resolve_space_path(spec: StudySpec, spec_path: Path) -> Path:
    """A bare name is looked up in the project's search_spaces/; anything else is a path
    relative to the spec file."""
    ref = spec.search_space
    if "/" not in ref and not ref.endswith((".yaml", ".yml")):
        return search_spaces_dir() / f"{ref}.yaml"
    p = Path(ref)
    return p if p.is_absolute() else (spec_path.parent / p)


def search_spaces_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "search_spaces"
