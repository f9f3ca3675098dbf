"""A declared search space: parameters with domains, conditions, and feasibility rules.

Parameters use tuner's canonical names (below); each engine adapter maps them to its own flags.
A parameter with `when` exists only when the parameters it names (declared earlier) have the
given values, so Optuna's define-by-run sampling never suggests, say, a draft length without
speculation. Feasibility rules run before any launch: an infeasible sample costs no server.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.errors import BadInput
from tuner.yamlio import load_model, read_yaml

# Canonical trial parameters tuner knows how to map to engine flags.
CANONICAL_PARAMETERS = {
    "tensor_parallel_size": "degree of tensor parallelism",
    "data_parallel_size": "data-parallel replicas (attention DP when experts are parallel)",
    "enable_expert_parallel": "spread MoE experts over the TP x DP ranks",
    "max_num_seqs": "maximum sequences in a batch",
    "max_num_batched_tokens": "maximum tokens in one scheduler step",
    "speculative_method": "none or ngram (model-free speculative decoding)",
    "num_speculative_tokens": "draft length of speculative decoding",
    "prompt_lookup_max": "n-gram speculation: longest n-gram looked up in the prompt",
}

Value = bool | int | float | str


class ParameterDecl(BaseModel):
    model_config = ConfigDict(extra="forbid")

    values: list[Value] = Field(description="The domain: the values to choose from.")
    when: dict[str, Value | list[Value]] = Field(
        default_factory=dict, description="Exists only when these earlier parameters match."
    )

    @model_validator(mode="after")
    def _non_empty(self) -> ParameterDecl:
        if not self.values:
            raise ValueError("empty domain: give at least one value")
        if len(set(map(repr, self.values))) != len(self.values):
            raise ValueError("values must be distinct")
        return self

    def active(self, chosen: dict[str, Any]) -> bool:
        for name, want in self.when.items():
            allowed = want if isinstance(want, list) else [want]
            if name not in chosen or chosen[name] not in allowed:
                return False
        return True


class SearchSpace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    engine: str
    parameters: dict[str, ParameterDecl] = Field(min_length=1)

    @field_validator("parameters")
    @classmethod
    def _names_and_conditions(cls, parameters: dict[str, ParameterDecl]):
        declared: list[str] = []
        for name, decl in parameters.items():
            if name not in CANONICAL_PARAMETERS:
                known = ", ".join(CANONICAL_PARAMETERS)
                raise ValueError(f"unknown parameter {name!r}: use one of {known}")
            for ref in decl.when:
                if ref not in declared:
                    raise ValueError(
                        f"{name}.when names {ref!r}, which is not declared before it"
                    )
            declared.append(name)
        return parameters

    def sample(self, trial: optuna.Trial) -> dict[str, Any]:
        """Define-by-run: suggest each active parameter in declaration order."""
        chosen: dict[str, Any] = {}
        for name, decl in self.parameters.items():
            if decl.active(chosen):
                chosen[name] = trial.suggest_categorical(name, decl.values)
        return chosen

    def enumerate(self) -> list[dict[str, Any]]:
        """Every configuration the space can produce (conditions applied), in a stable order."""
        configs: list[dict[str, Any]] = [{}]
        for name, decl in self.parameters.items():
            grown = []
            for c in configs:
                if decl.active(c):
                    grown.extend({**c, name: v} for v in decl.values)
                else:
                    grown.append(c)
            configs = grown
        return configs

    def size(self) -> int:
        return len(self.enumerate())


def load_space(path: Path) -> SearchSpace:
    return load_model(SearchSpace, read_yaml(path, "search space"), str(path))


@dataclass(frozen=True)
class ModelShape:
    """What feasibility needs to know about the served model (from its config.json)."""

    num_attention_heads: int
    num_key_value_heads: int
    num_experts: int  # 0 for a dense model
    vocab_size: int
    max_position_embeddings: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def world_size(config: dict[str, Any]) -> int:
    """Devices one trial occupies: every TP rank of every DP replica."""
    return int(config.get("tensor_parallel_size", 1)) * int(config.get("data_parallel_size", 1))


def infeasibility(config: dict[str, Any], shape: ModelShape, devices: int) -> str | None:
    """Why this configuration cannot run, or None. Only facts the engines enforce live here."""
    tp = int(config.get("tensor_parallel_size", 1))
    world = world_size(config)
    if world > devices:
        return f"needs {world} devices (TP {tp} x DP {world // tp}), the node has {devices}"
    if shape.num_attention_heads % tp:
        return f"TP {tp} does not divide the {shape.num_attention_heads} attention heads"
    if config.get("enable_expert_parallel"):
        if not shape.is_moe:
            return "expert parallel needs a Mixture-of-Experts model"
        if world == 1:
            return "expert parallel over a single rank is the same as no expert parallel"
        if shape.num_experts % world:
            return f"EP over {world} ranks does not divide the {shape.num_experts} experts"
    return None


def read_model_shape(model_dir: Path) -> ModelShape:
    import json

    cfg_path = Path(model_dir) / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        raise BadInput(
            f"model.path {model_dir}: no readable config.json ({e.__class__.__name__}): "
            "point model.path at a Hugging Face model directory"
        ) from e
    heads = cfg.get("num_attention_heads")
    if not isinstance(heads, int):
        raise BadInput(f"model.path {model_dir}: config.json has no num_attention_heads")
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    return ModelShape(
        num_attention_heads=heads,
        num_key_value_heads=int(cfg.get("num_key_value_heads", heads)),
        num_experts=int(experts or 0),
        vocab_size=int(cfg["vocab_size"]),
        max_position_embeddings=cfg.get("max_position_embeddings"),
    )


