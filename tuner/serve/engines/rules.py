"""Engine facts beyond the MoE kernels, read from tuner/data/engine_rules.yaml (each entry names
its source there): KV-cache types per architecture, the widest expert parallelism a MoE backend
takes, memory settings a recipe requires where one rank holds the whole model, how many GPUs
one server may span on a GPU type, and what a CPU needs for an FP8 KV cache."""

from __future__ import annotations

import functools
from typing import Any

import yaml

from tuner.spec.gpu_types import DATA, GpuType
from tuner.spec.model_shape import ModelShape, shape_by_name


@functools.cache
def _rules() -> dict[str, Any]:
    return yaml.safe_load((DATA / "engine_rules.yaml").read_text())


def kv_cache_dtype_infeasibility(engine: str, dtype: str | None, arch: str) -> str | None:
    allowed = _rules()["kv_cache_dtypes"].get(engine, {}).get(arch)
    if dtype is None or allowed is None or dtype in allowed:
        return None
    return f"{engine} KV cache {dtype} is not used on {arch} (use {' or '.join(allowed)})"


def cpu_kv_cache_dtype_infeasibility(engine: str, dtype: str | None, cpu_flags: frozenset[str],
                                     head_dim: int | None) -> str | None:
    """An FP8 KV cache on a CPU server: the CPU's instruction sets and the model's head size
    the engine's CPU build needs for it (it refuses at start-up otherwise, a server start lost)."""
    rule = _rules()["cpu_fp8_kv_cache"].get(engine)
    if rule is None or dtype is None or not dtype.startswith("fp8"):
        return None
    needs = rule["needs_any_of"]  # instruction set -> the /proc/cpuinfo flags it means
    if not any(set(flags) <= cpu_flags for flags in needs.values()):
        return (f"{engine}'s CPU build runs KV cache {dtype} only on x86 with "
                f"{' or '.join(needs)}, which this CPU lacks: use kv_cache_dtype auto on it")
    if head_dim is not None and head_dim % 32 and head_dim % 16 == 0:
        return (f"{engine}'s CPU build runs KV cache {dtype} only at a head size divisible by "
                f"32, not {head_dim}: use kv_cache_dtype auto for this model")
    return None


def expert_parallel_infeasibility(engine: str, backend: str | None, ep: int) -> str | None:
    most = _rules()["max_expert_parallel"].get(engine, {}).get(backend)
    if most is None or ep <= most:
        return None
    return f"MoE backend {backend} of {engine} runs with EP {most} at most, not {ep}"


def single_rank_memory_infeasibility(engine: str, config: dict[str, Any], shape: ModelShape,
                                     gpu: GpuType) -> str | None:
    """Where one rank holds every weight (no TP, no EP), the recipe's memory settings."""
    if int(config.get("tensor_parallel_size", 1)) != 1 or config.get("enable_expert_parallel"):
        return None
    for rule in _rules()["single_rank_memory"].get(engine, []):
        if gpu.name != rule["gpu"] or shape != _shape(rule["model"]):
            continue
        fraction = config.get("gpu_memory_fraction")
        if fraction is not None and float(fraction) < rule["min_gpu_memory_fraction"]:
            return (f"{rule['model']} on one {gpu.name} runs out of memory below memory "
                    f"fraction {rule['min_gpu_memory_fraction']} (vLLM's recipe)")
        tokens = config.get("max_num_tokens")
        if tokens is not None and int(tokens) > rule["max_num_tokens"]:
            return (f"{rule['model']} on one {gpu.name} runs out of memory above "
                    f"{rule['max_num_tokens']} batched tokens (vLLM's recipe)")
    return None


@functools.cache
def _shape(name: str) -> ModelShape:
    return shape_by_name(name)


def gpus_per_node(gpu_name: str) -> int | None:
    """GPUs one server may span on this GPU type (a GB200 compute tray: 4), None: no limit."""
    return _rules()["gpus_per_node"].get(gpu_name)


def failure_implicates(engine: str, reason: str | None) -> dict[str, Any] | None:
    """The parameter values a failure's cause follows from on this engine (engine_rules.yaml
    `failure_causes`: a value, or {"min": N}); None when no known cause matches `reason`."""
    for cause in _rules().get("failure_causes", {}).get(engine, []):
        if reason and cause["match"] in reason:
            return dict(cause["implicates"])
    return None
