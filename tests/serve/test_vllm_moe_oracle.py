"""tuner's table of vLLM MoE kernels (tuner/data/moe_backends.yaml) agrees with vLLM 0.32's own
MXFP4 oracle, run as on SM90 (H100/H200) and SM100 (B200/GB200): every backend and activation
of the gpt-oss spaces that the oracle refuses, or silently runs at another precision, is
infeasible in tuner, and every one it takes is accepted."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.serve.vllm_moe_oracle import select
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.engines.base import backend_infeasibility
from tuner.spec.space import load_space_file

pytestmark = pytest.mark.usefixtures("vllm_installed")
SETTINGS = EngineSettings(executable="vllm", model="openai/gpt-oss-120b", args={}, env={})


def space_domain(name: str) -> set[str]:
    out: set[str] = set()
    for space in ("gpt-oss-120b", "gpt-oss-20b"):
        decl = load_space_file(REPO / "search_spaces" / f"{space}.yaml").sections()["vllm"][name]
        values = decl.values
        out |= {v for vs in values.values() for v in vs} if isinstance(values, dict) \
            else set(values)
    return out


def vllm_verdict(monkeypatch, backend: str, activation: str, arch: str, ep: int = 1) -> str | None:
    """None where vLLM starts this MoE at the requested precision, else why not."""
    config = {"moe_backend": backend, "moe_activation": activation}
    engine_config = get_adapter("vllm").engine_config(config, SETTINGS)
    try:
        chosen, runs_at = select(monkeypatch, arch=arch, engine_config=engine_config, ep=ep)
    except ValueError as e:
        return str(e)
    if (runs_at or "bf16") != activation:
        return f"{chosen} runs {runs_at or 'bf16'} activations, not {activation}"
    return None


CASES = [(b, a, arch) for b in sorted(space_domain("moe_backend"))
         for a in sorted(space_domain("moe_activation")) for arch in ("hopper", "blackwell")]


def test_the_cases_cover_the_spaces():
    assert {"triton", "flashinfer_cutlass", "flashinfer_trtllm", "marlin"} <= {c[0] for c in CASES}
    assert {"bf16", "mxfp8"} == {c[1] for c in CASES}


@pytest.mark.parametrize(("backend", "activation", "arch"), CASES)
@pytest.mark.parametrize("ep", [1, 8])
def test_tuner_accepts_exactly_what_vllms_oracle_starts(monkeypatch, backend, activation, arch,
                                                        ep):
    vllm = vllm_verdict(monkeypatch, backend, activation, arch, ep)
    tuner = backend_infeasibility("vllm", backend, arch, activation)
    assert (tuner is None) == (vllm is None), f"tuner: {tuner}; vLLM: {vllm}"


def test_flashinfer_cutlass_with_bf16_activations_fails_at_start_on_sm100(monkeypatch):
    reason = vllm_verdict(monkeypatch, "flashinfer_cutlass", "bf16", "blackwell")
    assert "FLASHINFER_CUTLASS_MXFP4_BF16" in reason and "quantization scheme" in reason
    assert vllm_verdict(monkeypatch, "flashinfer_cutlass", "bf16", "hopper") is None


def test_the_mxfp8_kernel_is_reached_through_quantization_config(monkeypatch):
    config = get_adapter("vllm").engine_config(
        {"moe_backend": "flashinfer_trtllm", "moe_activation": "mxfp8"}, SETTINGS)
    assert config["quantization-config"] == {"moe": {"activation": "mxfp8"}}
    assert select(monkeypatch, arch="blackwell", engine_config=config) == (
        "FLASHINFER_TRTLLM_MXFP4_MXFP8", "mxfp8")
    bf16 = get_adapter("vllm").engine_config({"moe_backend": "flashinfer_trtllm"}, SETTINGS)
    assert "quantization-config" not in bf16
    assert select(monkeypatch, arch="blackwell", engine_config=bf16)[0] == (
        "FLASHINFER_TRTLLM_MXFP4_BF16")
