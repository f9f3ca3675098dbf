"""vLLM 0.32's own MXFP4 MoE selection (fused_moe/oracle/mxfp4.py), run on this CPU machine as on
a CUDA device of a given compute capability.

The CPU wheel holds the same Python as the CUDA build; what differs is the platform object and
the probes for the CUDA-only packages (FlashInfer, OpenAI's triton_kernels) that the CUDA image
ships. Those are replaced for the duration of one call; every rule the oracle and each kernel's
`is_supported_config` apply (device family, weight x activation scheme, activation, routing,
shape, parallel layout) is vLLM's own code.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

# gpt-oss-120b's MoE layer as vLLM's model file builds it (models/gpt_oss.py): 128 experts, top 4,
# hidden and intermediate 2880, SwiGLU-OAI with bias, renormalized top-k routing.
GPT_OSS_120B = {"num_experts": 128, "experts_per_token": 4, "hidden_dim": 2880,
                "intermediate_size": 2880}
SM = {"hopper": (9, 0), "blackwell": (10, 0)}  # H100/H200 and B200/GB200
PACKAGE_PROBES = ("has_flashinfer", "has_flashinfer_cutlass_fused_moe", "has_triton_kernels")


def _fake_cuda(capability: tuple[int, int]):
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    class FakeCuda(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"

        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(*capability)

    return FakeCuda()


def _moe_config(backend: str, ep: int):
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig,
        FusedMoEParallelConfig,
        RoutingMethodType,
    )

    parallel = FusedMoEParallelConfig.make_no_parallel()
    parallel.ep_size, parallel.use_ep = ep, ep > 1
    return FusedMoEConfig(
        **GPT_OSS_120B, num_local_experts=GPT_OSS_120B["num_experts"] // ep,
        num_logical_experts=GPT_OSS_120B["num_experts"], activation=MoEActivation.SWIGLUOAI,
        device="cuda", routing_method=RoutingMethodType.Renormalize,
        moe_parallel_config=parallel, in_dtype=torch.bfloat16, moe_backend=backend,
        has_bias=True)


def select(monkeypatch: pytest.MonkeyPatch, *, arch: str, engine_config: dict[str, Any],
           ep: int = 1) -> tuple[str, str | None]:
    """(vLLM's Mxfp4MoeBackend name, its activation) for a config.yaml tuner wrote, on `arch`;
    raises ValueError where vLLM refuses the combination at start."""
    from vllm.config.quantization import resolve_quantization_config
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle
    from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp8Dynamic

    for backend in oracle.Mxfp4MoeBackend:  # import every kernel module before patching
        try:
            oracle.backend_to_kernel_cls(backend)
        except (ImportError, ValueError, AttributeError):
            pass
    platform = _fake_cuda(SM[arch])
    for name, module in list(sys.modules.items()):
        if not name.startswith("vllm.") or not isinstance(module, types.ModuleType):
            continue
        if getattr(module, "current_platform", None) is not None:
            monkeypatch.setattr(module, "current_platform", platform)
        for probe in PACKAGE_PROBES:
            if callable(getattr(module, probe, None)):
                monkeypatch.setattr(module, probe, lambda *a, **k: True)
    # vLLM's own parser for the --quantization-config tuner emits.
    quant = resolve_quantization_config(None, engine_config.get("quantization-config"))
    current = types.SimpleNamespace(model_config=types.SimpleNamespace(quantization_config=quant))
    monkeypatch.setattr(oracle, "get_current_vllm_config", lambda: current)
    chosen, _ = oracle.select_mxfp4_moe_backend(
        _moe_config(engine_config.get("moe-backend", "auto"), ep))
    key = oracle._backend_activation_key(chosen)
    return chosen.value, ("mxfp8" if key == kMxfp8Dynamic else None if key is None else str(key))
