"""Declared search spaces: parameters with domains and conditions.

A space file (search_spaces/*.yaml) declares, per engine, parameters under tuner's canonical
names (below; each engine adapter maps them to its own flags). A domain is a list of values, or
a mapping from GPU type or architecture to a list, so one file serves Hopper and Blackwell: a
parameter whose mapping has no entry for the study's GPU does not exist there (e.g. a MoE kernel
only on the architectures that have it). A parameter with `when` exists only when the parameters
it names (declared earlier) have the given values, so Optuna's define-by-run sampling never
suggests, say, a draft length without speculation.

What cannot run is `tuner.spec.feasibility`'s; what the served model is, `tuner.spec.model_shape`'s.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.spec.errors import BadInput
from tuner.spec.gpu_types import GpuType
from tuner.spec.yamlio import load_model, read_yaml

# What a parameter's values are: each kind names its check and how to say it in an error.
COUNT, ITERATIONS, FLAG, NAME, FRACTION = "count", "iterations", "flag", "name", "fraction"
KINDS = {
    COUNT: "positive integers (e.g. 16)",
    ITERATIONS: "integers from 0 (e.g. 50)",
    FLAG: "true or false",
    NAME: "names (e.g. auto)",
    FRACTION: "fractions in (0, 1] (e.g. 0.9)",
}

# Canonical trial parameters: engine-neutral names the adapters map to flags, each with its kind.
CANONICAL_PARAMETERS = {
    "tensor_parallel_size": (COUNT, "degree of tensor parallelism (the GPUs of one server for "
                             "TRT-LLM)"),
    "data_parallel_size": (COUNT, "vLLM data-parallel ranks (attention DP when experts are "
                           "parallel)"),
    "enable_expert_parallel": (FLAG, "vLLM: spread MoE experts over the TP x DP ranks"),
    "expert_parallel_size": (COUNT, "TRT-LLM / SGLang: ranks the MoE experts are spread over"),
    "enable_attention_dp": (FLAG, "TRT-LLM / SGLang: attention data-parallel across the ranks "
                            "(DEP)"),
    "attention_dp_batching_wait_iters": (ITERATIONS, "TRT-LLM: iterations attention-DP "
                                         "balancing may wait"),
    "attention_dp_timeout_iters": (ITERATIONS, "TRT-LLM: iterations before attention-DP "
                                   "balancing gives up"),
    "moe_backend": (NAME, "the MoE kernel family"),
    "moe_activation": (NAME, "vLLM: MoE activation precision (bf16, or mxfp8 on Blackwell "
                       "kernels)"),
    "max_batch_size": (COUNT, "most sequences in a batch (vLLM max-num-seqs)"),
    "max_num_tokens": (COUNT, "most tokens in one scheduler step (vLLM max-num-batched-tokens)"),
    "kv_cache_dtype": (NAME, "KV-cache element type (auto, fp8)"),
    "gpu_memory_fraction": (FRACTION, "share of GPU memory for weights + KV (vLLM) or for KV "
                            "(TRT-LLM)"),
    "speculative_method": (NAME, "none, ngram (model-free) or eagle3 (draft model from the spec)"),
    "num_speculative_tokens": (COUNT, "draft length of speculative decoding"),
    "prompt_lookup_max": (COUNT, "n-gram speculation: longest n-gram looked up in the prompt"),
    "replicas": (COUNT, "independent servers of the configuration, each on devices of its own, "
                 "behind a router"),
    "router_policy": (NAME, "how the router in front of the replicas picks one for each request "
                      "(the router's own policy names, e.g. cache_aware, round_robin)"),
}

# Parameters of the deployment around the engine servers, not of any engine: no engine flag
# carries them, whatever the engine (tuner.serve.routers lays them out).
DEPLOYMENT_PARAMETERS = frozenset({"replicas", "router_policy"})


def replicas_of(config: dict[str, Any]) -> int:
    """The servers a configuration runs as: its `replicas`, 1 when it has none."""
    return int(config.get("replicas", 1))


def _fits(kind: str, value: Any) -> bool:
    if kind == FLAG:
        return isinstance(value, bool)
    if isinstance(value, bool):  # YAML's true is no size
        return False
    if kind in (COUNT, ITERATIONS):
        return isinstance(value, int) and value >= (1 if kind == COUNT else 0)
    if kind == FRACTION:
        return isinstance(value, int | float) and 0 < value <= 1
    return isinstance(value, str) and value != ""


def value_problem(name: str, value: Any) -> str | None:
    """Why `value` cannot be a value of canonical parameter `name`, or None."""
    kind = CANONICAL_PARAMETERS[name][0]
    if _fits(kind, value):
        return None
    hint = f": write {value}" if isinstance(value, str) and _fits(kind, _unquoted(value)) else ""
    return f"{name} value {value!r} is not one of its values, which are {KINDS[kind]}{hint}"


def _unquoted(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# Short names for one-line descriptions of a configuration (CLI tables, dashboard).
SHORT_NAMES = {"tensor_parallel_size": "tp", "data_parallel_size": "dp",
               "enable_expert_parallel": "ep", "expert_parallel_size": "ep",
               "enable_attention_dp": "adp", "attention_dp_batching_wait_iters": "adp_wait",
               "attention_dp_timeout_iters": "adp_timeout", "moe_backend": "moe",
               "moe_activation": "act", "max_batch_size": "batch",
               "max_num_tokens": "tokens", "kv_cache_dtype": "kv", "gpu_memory_fraction": "mem",
               "speculative_method": "spec", "num_speculative_tokens": "draft",
               "prompt_lookup_max": "lookup", "replicas": "replicas",
               "router_policy": "router"}


def describe(params: dict[str, Any]) -> str:
    """A configuration in one short line: `tp=2 ep=off batch=16`."""
    parts = []
    for k, v in params.items():
        if isinstance(v, bool):
            v = "on" if v else "off"
        parts.append(f"{SHORT_NAMES.get(k, k)}={v}")
    return " ".join(parts)


Value = bool | int | float | str
Domain = list[Value] | dict[str, list[Value]]



# A configuration that speculates without naming its draft length drafts this many tokens (the
# TensorRT-LLM gpt-oss guide's); the adapters and the performance model read it from here.
DEFAULT_DRAFT_LEN = 3

class ParameterDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")

    values: Domain = Field(description="Values to choose from, or GPU type/arch -> values.")
    when: dict[str, Value | list[Value]] = Field(
        default_factory=dict, description="Exists only when these earlier parameters match."
    )

    @model_validator(mode="after")
    def _non_empty(self) -> ParameterDecl:
        lists = self.values.values() if isinstance(self.values, dict) else [self.values]
        for values in lists:
            if not values:
                raise ValueError("empty domain: give at least one value")
            if len({json.dumps(v) for v in values}) != len(values):
                raise ValueError("values must be distinct")
        return self

    def values_for(self, gpu: GpuType) -> list[Value] | None:
        if isinstance(self.values, list):
            return self.values
        for key in (gpu.name, gpu.arch):
            for k, v in self.values.items():
                if k.lower() == key.lower():
                    return v
        return None

    def active(self, chosen: dict[str, Any]) -> bool:
        for name, want in self.when.items():
            allowed = want if isinstance(want, list) else [want]
            if name not in chosen or chosen[name] not in allowed:
                return False
        return True


def _check_parameters(parameters: dict[str, ParameterDecl]) -> dict[str, ParameterDecl]:
    """Known names, values of each parameter's kind (a string where a size belongs is caught
    here, not by an engine at launch), conditions on earlier parameters with their kinds."""
    declared: list[str] = []
    for name, decl in parameters.items():
        if name not in CANONICAL_PARAMETERS:
            raise ValueError(f"unknown parameter {name!r}: use one of "
                             f"{', '.join(CANONICAL_PARAMETERS)}")
        lists = decl.values.values() if isinstance(decl.values, dict) else [decl.values]
        for value in (v for values in lists for v in values):
            if (problem := value_problem(name, value)) is not None:
                raise ValueError(problem)
        for ref, want in decl.when.items():
            if ref not in declared:
                raise ValueError(f"{name}.when names {ref!r}, which is not declared before it")
            for value in want if isinstance(want, list) else [want]:
                if (problem := value_problem(ref, value)) is not None:
                    raise ValueError(f"{name}.when: {problem}")
        declared.append(name)
    return parameters


class EngineSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parameters: dict[str, ParameterDecl] = Field(min_length=1)

    _check = field_validator("parameters")(classmethod(lambda cls, v: _check_parameters(v)))


class SpaceFile(BaseModel):
    """A space file as written: one engine (`engine` + `parameters`) or several (`engines`)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    model: str | None = Field(None, description="Model shape in tuner/data/models.yaml.")
    engine: str | None = None
    parameters: dict[str, ParameterDecl] | None = None
    engines: dict[str, EngineSection] | None = None

    _check = field_validator("parameters")(
        classmethod(lambda cls, v: v if v is None else _check_parameters(v)))

    @model_validator(mode="after")
    def _one_form(self) -> SpaceFile:
        single = self.engine is not None or self.parameters is not None
        if single == (self.engines is not None):
            raise ValueError("give either `engine` with `parameters`, or `engines`")
        if single and (self.engine is None or not self.parameters):
            raise ValueError("`engine` and `parameters` go together")
        return self

    def sections(self) -> dict[str, dict[str, ParameterDecl]]:
        if self.engines is not None:
            return {k: v.parameters for k, v in self.engines.items()}
        return {self.engine: self.parameters}

    def resolve(self, engine: str, gpu: GpuType, source: str = "") -> SearchSpace:
        sections = self.sections()
        if engine not in sections:
            raise BadInput(f"search space {self.name}{source} has no parameters for engine "
                           f"{engine}: it covers {', '.join(sections)}")
        params = {}
        for name, decl in sections[engine].items():
            values = decl.values_for(gpu)
            if values is not None:
                params[name] = ParameterDecl(values=values, when=decl.when)
        if not params:
            raise BadInput(f"search space {self.name}{source}: no parameter of engine {engine} "
                           f"applies to {gpu.name}")
        # A condition on a parameter absent on this GPU can never hold: drop the dependant.
        for name in list(params):
            if any(ref not in params for ref in params[name].when):
                del params[name]
        return SearchSpace(name=self.name, description=self.description, engine=engine,
                           gpu_type=gpu.name, model=self.model, parameters=params)


class SearchSpace(BaseModel):
    """A space resolved for one engine and GPU type: what a study samples from."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    engine: str
    gpu_type: str = "cpu"
    model: str | None = None
    parameters: dict[str, ParameterDecl] = Field(min_length=1)

    def values(self, name: str) -> list[Value]:
        v = self.parameters[name].values
        assert isinstance(v, list)  # resolved spaces hold plain lists
        return v

    def sample(self, suggest: Callable[[str, list[Any]], Any]) -> dict[str, Any]:
        """Define-by-run: `suggest(name, values)` (the sampler's choice, e.g. Optuna's
        `trial.suggest_categorical`) for each active parameter in declaration order."""
        chosen: dict[str, Any] = {}
        for name, decl in self.parameters.items():
            if decl.active(chosen):
                chosen[name] = suggest(name, self.values(name))
        return chosen

    def enumerate(self) -> list[dict[str, Any]]:
        """Every configuration the space can produce (conditions applied), in a stable order."""
        configs: list[dict[str, Any]] = [{}]
        for name, decl in self.parameters.items():
            grown = []
            for c in configs:
                if decl.active(c):
                    grown.extend({**c, name: v} for v in self.values(name))
                else:
                    grown.append(c)
            configs = grown
        return configs

    def size(self) -> int:
        return len(self.enumerate())


def load_space_file(path: Path) -> SpaceFile:
    return load_model(SpaceFile, read_yaml(path, "search space"), str(path))


def load_space(path: Path, engine: str | None = None, gpu: GpuType | None = None) -> SearchSpace:
    from tuner.spec.gpu_types import CPU

    f = load_space_file(path)
    return f.resolve(engine or next(iter(f.sections())), gpu or CPU, f" ({path})")
