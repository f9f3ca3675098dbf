"""The equations: memory per GPU and the time of one engine step, computed on numpy arrays so a
whole search space is one computation (the predictions per level are in _predict)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tuner.plan.perfmodel._facts import GB, Calibration, EngineFacts, ModelFacts, facts
from tuner.plan.perfmodel._layout import Layout
from tuner.spec.errors import BadInput
from tuner.spec.gpu_types import GpuType

MAX = math.inf  # concurrency "max": as many sequences as the batch limit and KV cache allow


@dataclass(frozen=True)
class Setup:
    """Everything one prediction needs, engine-neutral."""

    model: ModelFacts
    gpu: GpuType
    engine: EngineFacts
    layout: Layout
    moe_backend: str
    max_batch_size: int  # per attention rank
    max_num_tokens: int
    kv_cache_dtype: str
    memory_fraction: float
    speculative: str  # none, eagle3, ngram
    draft_len: int
    isl: float  # mean prompt length
    osl: float  # mean output length
    replicas: int = 1  # servers sharing the figure's GPUs and its concurrency
    # Lengths uniform in [mean (1 - spread), mean (1 + spread)] (a workload's range_ratio).
    spread: float = 0.0
    # Accepted / proposed draft tokens, measured or given (--acceptance); None: the fitted
    # per-token acceptance of the method.
    acceptance_rate: float | None = None
    # A closed loop timed from every client's simultaneous start to its last completion, with
    # this many prompts per client (a published harness): its start burst and its drain are in
    # the figures. None: a window of steady state (tuner's load generator times no start).
    prompts_per_client: float | None = None


def setup_of(config: dict[str, Any], *, model: ModelFacts, gpu: GpuType, engine: EngineFacts,
             layout: Layout, isl: float, osl: float, spread: float = 0.0,
             acceptance_rate: float | None = None) -> Setup:
    """A study configuration (canonical parameters) as a Setup."""
    method = str(config.get("speculative_method", "none"))
    k = int(config.get("num_speculative_tokens", facts().default_draft_len)) \
        if method != "none" else 0
    return Setup(
        model=model, gpu=gpu, engine=engine, layout=layout,
        moe_backend=str(config.get("moe_backend") or default_backend(engine, gpu)),
        max_batch_size=int(config.get("max_batch_size", engine.max_batch_size)),
        max_num_tokens=int(config.get("max_num_tokens", engine.max_num_tokens)),
        kv_cache_dtype=str(config.get("kv_cache_dtype", "auto")),
        memory_fraction=float(config.get("gpu_memory_fraction", 0.9)),
        speculative=method, draft_len=k, isl=isl, osl=osl, spread=spread,
        acceptance_rate=acceptance_rate if method != "none" else None,
    )


def default_backend(engine: EngineFacts, gpu: GpuType) -> str:
    return engine.moe_backend_default.get(gpu.arch) or next(iter(engine.moe_kernels))


# ---------------------------------------------------------------- vectorized cases


@dataclass
class Cases:
    """Setups as numpy arrays (one element per setup), so a whole space is one computation."""

    layers: np.ndarray
    sliding_layers: np.ndarray
    window: np.ndarray
    hidden: np.ndarray
    heads: np.ndarray
    kv_heads: np.ndarray
    head_dim: np.ndarray
    experts: np.ndarray
    topk: np.ndarray
    attention_params: np.ndarray
    expert_params: np.ndarray
    embedding_params: np.ndarray
    expert_bytes: np.ndarray
    dense_bytes: np.ndarray
    memory: np.ndarray  # bytes
    hbm: np.ndarray  # bytes/s
    dense_peak: np.ndarray  # BF16 FLOP/s
    moe_peak: np.ndarray  # FLOP/s at the MoE kernel's precision
    link: np.ndarray  # NVLink bytes/s, one direction
    fraction_of_total: np.ndarray  # bool
    world: np.ndarray
    atp: np.ndarray
    adp: np.ndarray
    ep: np.ndarray
    max_batch: np.ndarray
    max_tokens: np.ndarray
    kv_bytes: np.ndarray
    memory_fraction: np.ndarray
    draft_len: np.ndarray
    draft_params: np.ndarray
    draft_layers: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    replicas: np.ndarray
    spread: np.ndarray
    acc_rate: np.ndarray  # NaN where the fitted per-token acceptance applies
    prompts_per_client: np.ndarray  # NaN: steady state, no start burst
    # factor keys: index arrays into the names below
    family: np.ndarray
    engine: np.ndarray
    method: np.ndarray
    arch: np.ndarray
    family_names: tuple[str, ...] = ()
    engine_names: tuple[str, ...] = ()
    method_names: tuple[str, ...] = ()
    arch_names: tuple[str, ...] = ()

    def column(self) -> Cases:
        """The same cases as an (N, 1) column, to broadcast against concurrency levels."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v[:, None] if isinstance(v, np.ndarray) else v
        return Cases(**out)


def kernel_family(s: Setup) -> str:
    family = s.engine.moe_kernels.get(s.moe_backend)
    if family is None:
        raise BadInput(f"the performance model has no kernel family for MoE backend "
                       f"{s.moe_backend!r} of {s.engine.name} (tuner/data/perfmodel.yaml)")
    return family


def _moe_peak(family: str, gpu: GpuType) -> float:
    precision = facts().kernel_precision[family]
    p = precision.get(gpu.arch, precision["default"])
    tflops = gpu.fp8_dense_tflops if p == "fp8" else gpu.bf16_dense_tflops
    return (tflops or gpu.bf16_dense_tflops or 0.0) * 1e12


def stack(setups: Sequence[Setup]) -> Cases:
    """Setups as Cases. Setups usually share their model, GPU and engine: those are read once."""
    f = facts()

    def arr(get, dtype=float) -> np.ndarray:
        return np.fromiter((get(s) for s in setups), dtype=dtype, count=len(setups))

    def index(keys: list[str]) -> tuple[np.ndarray, tuple[str, ...]]:
        names = tuple(sorted(set(keys)))
        where = {n: i for i, n in enumerate(names)}
        return np.fromiter((where[k] for k in keys), dtype=int, count=len(keys)), names

    for s in setups:
        if s.speculative != "none" and s.speculative not in f.drafts:
            raise BadInput(f"the performance model has no draft facts for speculative method "
                           f"{s.speculative!r} (tuner/data/perfmodel.yaml)")
    families = [kernel_family(s) for s in setups]
    peaks: dict[tuple[str, str], float] = {}
    for fam, s in zip(families, setups, strict=True):
        peaks.setdefault((fam, s.gpu.name), _moe_peak(fam, s.gpu))
    moe_peak = [peaks[(fam, s.gpu.name)] for fam, s in zip(families, setups, strict=True)]
    fam_idx, fam_names = index(families)
    eng_idx, eng_names = index([s.engine.name for s in setups])
    met_idx, met_names = index([s.speculative for s in setups])
    arch_idx, arch_names = index([s.gpu.arch for s in setups])
    missing = [a for a in arch_names if f"moe_eff.{a}" not in f.priors]
    if missing:
        raise BadInput(f"the performance model has no MoE efficiency for architecture "
                       f"{missing[0]} (moe_eff.{missing[0]} in tuner/data/perfmodel.yaml)")
    draft = {m: f.drafts.get(m, {"draft_params_b": 0.0, "draft_layers": 0}) for m in met_names}
    return Cases(
        layers=arr(lambda s: s.model.layers), sliding_layers=arr(lambda s: s.model.sliding_layers),
        window=arr(lambda s: s.model.window), hidden=arr(lambda s: s.model.hidden),
        heads=arr(lambda s: s.model.heads), kv_heads=arr(lambda s: s.model.kv_heads),
        head_dim=arr(lambda s: s.model.head_dim), experts=arr(lambda s: s.model.experts),
        topk=arr(lambda s: s.model.experts_per_token),
        attention_params=arr(lambda s: s.model.attention_params),
        expert_params=arr(lambda s: s.model.expert_params),
        embedding_params=arr(lambda s: s.model.embedding_params),
        expert_bytes=arr(lambda s: s.model.expert_bytes),
        dense_bytes=arr(lambda s: s.model.dense_bytes),
        memory=arr(lambda s: s.gpu.memory_gb * GB), hbm=arr(lambda s: s.gpu.hbm_tb_s * 1e12),
        dense_peak=arr(lambda s: s.gpu.bf16_dense_tflops * 1e12),
        moe_peak=np.array(moe_peak, dtype=float),
        link=arr(lambda s: (s.gpu.nvlink_bidir_gb_s or 0.0) / 2 * GB),
        fraction_of_total=arr(lambda s: s.engine.memory_fraction_of == "total", bool),
        world=arr(lambda s: s.layout.world), atp=arr(lambda s: s.layout.attention_tp),
        adp=arr(lambda s: s.layout.attention_dp), ep=arr(lambda s: s.layout.expert_parallel),
        max_batch=arr(lambda s: s.max_batch_size), max_tokens=arr(lambda s: s.max_num_tokens),
        kv_bytes=arr(lambda s: 1.0 if s.kv_cache_dtype.lower().startswith("fp8")
                     else s.model.dense_bytes),
        memory_fraction=arr(lambda s: s.memory_fraction),
        draft_len=arr(lambda s: s.draft_len),
        draft_params=arr(lambda s: draft[s.speculative]["draft_params_b"] * 1e9),
        draft_layers=arr(lambda s: draft[s.speculative]["draft_layers"]),
        isl=arr(lambda s: s.isl), osl=arr(lambda s: s.osl), replicas=arr(lambda s: s.replicas),
        spread=arr(lambda s: s.spread),
        acc_rate=arr(lambda s: np.nan if s.acceptance_rate is None else s.acceptance_rate),
        prompts_per_client=arr(lambda s: np.nan if s.prompts_per_client is None
                               else s.prompts_per_client),
        family=fam_idx, engine=eng_idx, method=met_idx, arch=arch_idx, family_names=fam_names,
        engine_names=eng_names, method_names=met_names, arch_names=arch_names,
    )


@dataclass
class Factors:
    """The calibration's factors as arrays aligned with a Cases (per family, engine, method)."""

    bw_eff: float
    kv_bw_eff: float
    attn_seq_s: float
    dense_eff: float
    moe_eff: np.ndarray
    moe_dequant: np.ndarray  # bytes/s of MXFP4 experts the MoE kernels dequantize (inf: native)
    fill_tokens: float
    layer_s: np.ndarray
    step_s: np.ndarray
    comm_eff: float
    comm_latency_s: float
    ep_imbalance: float
    acceptance: np.ndarray
    request_s: np.ndarray  # per request, outside the steps
    admit_steps: np.ndarray  # mean steps a new request waits for its prefill's step
    dp_balance_steps: np.ndarray  # attention DP: steps a prompt waits for the other ranks'
    drain_cycles: float


def factor_arrays(c: Cases, cal: Calibration) -> Factors:
    def pick(prefix: str, names: tuple[str, ...], idx: np.ndarray,
             absent: float = 1.0) -> np.ndarray:
        priors = facts().priors
        values = [cal[f"{prefix}.{n}"] if f"{prefix}.{n}" in priors else absent for n in names]
        return np.array(values or [absent])[idx]

    device = pick("step_device", c.arch_names, c.arch)
    return Factors(
        bw_eff=cal["bw_eff"], kv_bw_eff=cal["kv_bw_eff"],
        attn_seq_s=cal["attn_seq_us"] * 1e-6, dense_eff=cal["dense_eff"],
        moe_eff=(pick("moe_eff", c.arch_names, c.arch)
                 * pick("moe_kernel", c.family_names, c.family)),
        moe_dequant=pick("moe_dequant_tb_s", c.arch_names, c.arch, absent=math.inf) * 1e12,
        fill_tokens=cal["moe_fill_tokens"], layer_s=cal["layer_overhead_us"] * 1e-6 * device,
        step_s=(cal["step_overhead_ms"] * 1e-3 * pick("step_engine", c.engine_names, c.engine)
                * device),
        comm_eff=cal["comm_eff"], comm_latency_s=cal["comm_latency_us"] * 1e-6,
        ep_imbalance=cal["ep_imbalance"], acceptance=pick("acceptance", c.method_names, c.method),
        request_s=(cal["request_overhead_ms"] * 1e-3
                   * pick("request_engine", c.engine_names, c.engine)),
        admit_steps=pick("admit_steps", c.engine_names, c.engine, absent=0.5),
        dp_balance_steps=pick("dp_balance_steps", c.engine_names, c.engine, absent=0.0),
        drain_cycles=cal["drain_cycles"],
    )


# ---------------------------------------------------------------- memory


@dataclass
class Memory:
    """Per GPU, in bytes."""

    weights: np.ndarray
    activations: np.ndarray
    reserved: float
    kv_budget: np.ndarray  # what the KV cache may use (negative: not even the weights fit)
    kv_per_token_layer: np.ndarray


def memory(c: Cases) -> Memory:
    f = facts()
    dense = (c.layers * c.attention_params + 2 * c.embedding_params) * c.dense_bytes / c.atp
    experts = c.layers * c.experts * c.expert_params * c.expert_bytes / c.world
    weights = dense + experts + c.draft_params * c.dense_bytes
    moe_tp = c.world / c.ep
    per_token = (f.activation_hidden_copies * c.hidden * c.dense_bytes
                 + 2 * c.topk * (c.expert_params / 3 / c.hidden) * c.dense_bytes / moe_tp)
    logits = np.minimum(c.max_batch, c.max_tokens) * (c.embedding_params / c.hidden) / c.atp
    activations = c.max_tokens * per_token + logits * f.logits_bytes
    used = weights + activations + f.reserved_bytes
    budget = np.where(c.fraction_of_total, c.memory_fraction * c.memory - used,
                      c.memory_fraction * (c.memory - used))
    kv_tl = 2 * c.kv_heads * c.head_dim * c.kv_bytes / np.minimum(c.atp, c.kv_heads)
    return Memory(weights, activations, f.reserved_bytes, budget, kv_tl)


def kv_per_sequence(c: Cases, mem: Memory, tokens: np.ndarray) -> np.ndarray:
    full = c.layers - c.sliding_layers
    window = np.minimum(tokens, c.window)
    return mem.kv_per_token_layer * (full * tokens + c.sliding_layers * window)


# ---------------------------------------------------------------- time of one step


def step_time(c: Cases, f: Factors, b: np.ndarray, seqs: np.ndarray, p_rank: np.ndarray,
              p_all: np.ndarray) -> np.ndarray:
    """Seconds of one engine step with b sequences decoding on the busiest rank, `seqs` on all
    ranks, and p_rank / p_all prompt tokens prefilled in the same step (rank / all ranks)."""
    q = 1 + c.draft_len  # tokens each sequence puts through the target model (verify k + 1)
    n_rank = b * q + p_rank
    tokens = seqs * q + p_all  # through the (shared) MoE layers
    bw = c.hbm * f.bw_eff
    dense = c.dense_peak * f.dense_eff

    def roof(nbytes, flops, rate):
        return np.maximum(nbytes / bw, flops / rate)

    proj = roof(c.layers * c.attention_params * c.dense_bytes / c.atp,
                2 * c.layers * c.attention_params / c.atp * n_rank, dense)
    head = roof(c.embedding_params * c.dense_bytes / c.atp,
                2 * c.embedding_params / c.atp * b * q, dense)
    full = c.layers - c.sliding_layers
    ctx = c.isl + c.osl / 2
    span = full * ctx + c.sliding_layers * np.minimum(ctx, c.window)
    span_prefill = full * c.isl / 2 + c.sliding_layers * np.minimum(c.isl / 2, c.window)
    kv_tl = 2 * c.kv_heads * c.head_dim * c.kv_bytes / np.minimum(c.atp, c.kv_heads)
    attn = np.maximum(b * (span * kv_tl / (c.hbm * f.kv_bw_eff) + c.layers * f.attn_seq_s),
                      4 * (c.heads / c.atp)
                      * c.head_dim * (b * q * span + p_rank * span_prefill)
                      / dense)
    touched = c.experts * (1 - (1 - c.topk / c.experts) ** tokens)
    per_expert = tokens * c.topk / np.maximum(touched, 1e-9)  # tokens each used expert gets
    small = facts().moe_small_batch_tokens
    fill = (per_expert + small) / (per_expert + small + f.fill_tokens)  # tile fill
    moe_flops = 2 * c.layers * c.expert_params * c.topk * tokens / c.world
    moe_bytes = c.layers * touched * c.expert_params * c.expert_bytes / c.world
    moe = np.maximum(roof(moe_bytes, moe_flops, c.moe_peak * f.moe_eff * np.maximum(fill, 1e-9)),
                     moe_bytes / f.moe_dequant)
    moe = moe * (1 + f.ep_imbalance * np.log2(c.ep))
    draft = c.draft_len * (roof(c.draft_params * c.dense_bytes, 2 * c.draft_params * b, dense)
                           + c.draft_layers * f.layer_s)
    return (proj + head + attn + moe + draft + _comm(c, f, n_rank, tokens)
            + c.layers * f.layer_s + f.step_s)


def _comm(c: Cases, f: Factors, n_rank: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    link = np.maximum(c.link * f.comm_eff, 1.0)
    act = c.hidden * c.dense_bytes  # one token's hidden state

    def all_reduce(nbytes, n):
        return np.where(n > 1, 2 * (n - 1) / n * nbytes / link + f.comm_latency_s, 0.0)

    def all_to_all(nbytes, n):
        return np.where(n > 1, (n - 1) / n * nbytes / link + f.comm_latency_s, 0.0)

    moe_tp = c.world / c.ep
    attention = all_reduce(n_rank * act, c.atp)
    # Without EP the experts are split by TP over every rank: with attention DP the ranks first
    # gather each other's tokens (all-gather + reduce-scatter ~ an all-reduce of all tokens).
    moe_tp_only = all_reduce(np.where(c.adp > 1, tokens, n_rank) * act, moe_tp)
    # With EP each rank sends its tokens' k copies out (dispatch) and back (combine).
    expert_parallel = (2 * all_to_all(n_rank / c.atp * c.topk * act, c.ep)
                       + all_reduce(n_rank * act, moe_tp))
    return c.layers * (attention + np.where(c.ep > 1, expert_parallel, moe_tp_only))


