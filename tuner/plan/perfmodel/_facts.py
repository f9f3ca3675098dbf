"""The performance model's inputs from data files: model shapes, GPU specs, engine facts, priors
and fitted factors. Read here, and nowhere else in the model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tuner.spec.errors import BadInput
from tuner.spec.gpu_types import DATA, GpuType, gpu_types
from tuner.spec.model_shape import known_shapes
from tuner.spec.space import DEFAULT_DRAFT_LEN

CALIBRATION_FILE = DATA / "perfmodel_calibration.json"
PUBLISHED_FILE = DATA / "published.csv"
GB = 1e9



@dataclass(frozen=True)
class ModelFacts:
    """The served model's shape and precisions (tuner/data/models.yaml)."""

    name: str
    layers: int
    sliding_layers: int  # layers that keep only `window` tokens of KV cache
    window: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int
    experts_per_token: int
    intermediate: int  # per-expert MLP width
    vocab: int
    expert_bytes: float  # bytes per expert parameter
    dense_bytes: float  # bytes per other parameter

    @property
    def attention_params(self) -> int:
        """One layer's attention projections and router."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (q + 2 * kv) + q * self.hidden + self.hidden * self.experts

    @property
    def expert_params(self) -> int:
        """One expert of one layer: gate, up and down projections."""
        return 3 * self.hidden * self.intermediate

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        per_layer = self.attention_params + self.experts * self.expert_params
        return self.layers * per_layer + 2 * self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters one token goes through (the LM head, not the embedding lookup)."""
        per_layer = self.attention_params + self.experts_per_token * self.expert_params
        return self.layers * per_layer + self.embedding_params


def model_facts(name: str) -> ModelFacts:
    """A shape of tuner/data/models.yaml, or a tiny model tuner generates (model.generate)."""
    if name in GENERATED_SHAPES:
        return _generated_facts(name)
    shapes = known_shapes()
    if name not in shapes:
        raise BadInput(f"model shape {name!r} is not in tuner/data/models.yaml: the performance "
                       f"model knows {', '.join([*shapes, *GENERATED_SHAPES])}")
    s = shapes[name]
    missing = [k for k in ("intermediate_size", "sliding_window", "sliding_window_layers",
                           "expert_bits_per_param", "dense_bits_per_param") if k not in s]
    if missing:
        raise BadInput(f"model shape {name} in tuner/data/models.yaml lacks {', '.join(missing)}, "
                       "which the performance model needs")
    return ModelFacts(
        name=name, layers=s["num_hidden_layers"], sliding_layers=s["sliding_window_layers"],
        window=s["sliding_window"], hidden=s["hidden_size"], heads=s["num_attention_heads"],
        kv_heads=s["num_key_value_heads"], head_dim=s["head_dim"], experts=s["num_experts"],
        experts_per_token=s["experts_per_token"], intermediate=s["intermediate_size"],
        vocab=s["vocab_size"], expert_bytes=s["expert_bits_per_param"] / 8,
        dense_bytes=s["dense_bits_per_param"] / 8,
    )


# The generated tiny gpt-oss (tuner.serve.tiny_model, BF16 weights), so a CPU study's trials can
# refit the model: its shape is read from the generator, not copied.
GENERATED_SHAPES = ("tiny-gpt-oss",)


def _generated_facts(name: str) -> ModelFacts:
    from tuner.serve.tiny_model import TINY_GPT_OSS, VOCAB_SIZE

    s = TINY_GPT_OSS
    sliding = sum(t == "sliding_attention" for t in s["layer_types"])
    return ModelFacts(
        name=name, layers=s["num_hidden_layers"], sliding_layers=sliding,
        window=s["sliding_window"], hidden=s["hidden_size"], heads=s["num_attention_heads"],
        kv_heads=s["num_key_value_heads"], head_dim=s["head_dim"],
        experts=s["num_local_experts"], experts_per_token=s["num_experts_per_tok"],
        intermediate=s["intermediate_size"], vocab=VOCAB_SIZE, expert_bytes=2.0,
        dense_bytes=2.0,
    )


@dataclass(frozen=True)
class EngineFacts:
    name: str
    memory_fraction_of: str  # "total": weights + activations + KV; "free": KV of what is left
    moe_backend_default: dict[str, str]  # architecture -> backend name
    max_batch_size: int
    max_num_tokens: int
    moe_kernels: dict[str, str]  # backend name -> kernel family


@dataclass(frozen=True)
class Prior:
    value: float
    sigma: float
    transform: str  # "log" or "logit"
    about: str


@dataclass(frozen=True)
class Harness:
    """A benchmark harness's settings its published figures leave out (tuner/data/perfmodel.yaml
    `harnesses`), recognised by a word of a figure's source."""

    name: str
    match: tuple[str, ...]
    length_range: str  # "a..b" as a figure's length_range column
    prompts_per_client: float  # closed loop: prompts per client, timed from every client's start
    max_num_tokens: dict[str, int]  # engine -> its servers' token budget, where not the default

    def matches(self, source: str) -> bool:
        return any(word.lower() in source.lower() for word in self.match)


@dataclass(frozen=True)
class Facts:
    reserved_bytes: float
    activation_hidden_copies: float
    logits_bytes: float
    moe_small_batch_tokens: float
    engines: dict[str, EngineFacts]
    kernel_precision: dict[str, dict[str, str]]
    drafts: dict[str, dict[str, float]]
    default_draft_len: int
    priors: dict[str, Prior]
    cpu_rank: GpuType  # one CPU rank of the CPU build, as a device with a roofline
    band_sigma: dict[str, float]  # log-error sigma per metric where calibration gives none
    data_sigma: dict[str, float]  # per metric group: how far a fit lets it miss (log error)
    harnesses: tuple[Harness, ...]
    unmodelled: dict[str, str]  # serving modes the model skips, with the reason

    def engine(self, name: str) -> EngineFacts:
        if name not in self.engines:
            raise BadInput(f"the performance model has no facts for engine {name!r} "
                           f"(tuner/data/perfmodel.yaml covers {', '.join(self.engines)})")
        return self.engines[name]


@cache
def facts() -> Facts:
    raw = yaml.safe_load((DATA / "perfmodel.yaml").read_text())
    engines = {
        name: EngineFacts(name=name, memory_fraction_of=e["memory_fraction_of"],
                          moe_backend_default=e["moe_backend_default"],
                          max_batch_size=e["max_batch_size"], max_num_tokens=e["max_num_tokens"],
                          moe_kernels=raw["moe_kernels"].get(name, {}))
        for name, e in raw["engines"].items()
    }
    priors = {name: Prior(p["prior"], p["sigma"], p.get("transform", "log"), p["about"])
              for name, p in raw["factors"].items()}
    spec = dict(raw["speculative"])
    cpu = raw["cpu_rank"]
    return Facts(
        reserved_bytes=raw["memory"]["reserved_gb"] * GB,
        activation_hidden_copies=raw["memory"]["activation_hidden_copies"],
        logits_bytes=raw["memory"]["logits_bytes_per_element"],
        moe_small_batch_tokens=raw["moe"]["small_batch_tokens"], engines=engines,
        kernel_precision=raw["kernel_precision"], drafts=spec, default_draft_len=DEFAULT_DRAFT_LEN,
        priors=priors,
        cpu_rank=GpuType(name="cpu", arch="cpu", memory_gb=cpu["memory_gb"],
                         hbm_tb_s=cpu["memory_tb_s"], bf16_dense_tflops=cpu["bf16_tflops"],
                         nvlink_bidir_gb_s=cpu["link_bidir_gb_s"]),
        band_sigma=dict(raw["bands"]["prior_sigma"]), unmodelled=dict(raw["unmodelled"]),
        data_sigma=dict(raw["fit"]["data_sigma"]),
        harnesses=tuple(Harness(name, tuple(h["match"]), h["length_range"],
                                float(h["prompts_per_client"]), dict(h.get("max_num_tokens", {})))
                        for name, h in raw["harnesses"].items()),
    )


def device(gpu: GpuType) -> GpuType:
    """The GPU type as the model computes with it: its datasheet figures, or for the CPU build
    the estimated figures of one CPU rank (tuner/data/perfmodel.yaml)."""
    if gpu.arch == "cpu":
        return facts().cpu_rank
    if gpu.hbm_tb_s is None or gpu.bf16_dense_tflops is None:
        raise BadInput(f"GPU type {gpu.name} has no bandwidth or FLOPS figures in "
                       "tuner/data/gpus.csv: the performance model needs them")
    return gpu


def gpu_for_model(name: str) -> GpuType:
    for key, g in gpu_types().items():
        if key.lower() == name.lower():
            return device(g)
    raise BadInput(f"GPU type {name!r} is not in tuner/data/gpus.csv")


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Calibration:
    """Values of the free factors, and where they came from."""

    factors: dict[str, float]
    source: str
    summary: dict[str, Any]

    def __getitem__(self, name: str) -> float:
        return self.factors.get(name, facts().priors[name].value)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": 1, "source": self.source, "factors": self.factors,
                "summary": self.summary}


def prior_calibration() -> Calibration:
    return Calibration({k: p.value for k, p in facts().priors.items()}, "priors", {})


def load_calibration(path: Path | None = None) -> Calibration:
    """The fitted factors (the shipped file by default); the priors when no file exists yet."""
    path = path or CALIBRATION_FILE
    if not path.exists():
        if path == CALIBRATION_FILE:
            return prior_calibration()
        raise BadInput(f"--calibration {path}: no such file")
    try:
        raw = json.loads(path.read_text())
        values = {str(k): float(v) for k, v in raw["factors"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise BadInput(f"{path} is not a perfmodel calibration ({e.__class__.__name__}): write "
                       "one with `tuner plan --calibrate STUDY`") from e
    unknown = sorted(set(values) - set(facts().priors))
    if unknown:
        raise BadInput(f"{path} names unknown factors {unknown}: it is from another tuner version")
    return Calibration(values, str(raw.get("source", path.name)), raw.get("summary", {}))
