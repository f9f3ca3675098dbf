"""Golden contracts: what tuner emits for TensorRT-LLM and SGLang exists in the releases it
targets (key lists derived from their source, tuner/serve/engines/data/), and NVIDIA's curated
gpt-oss configurations come out of tuner unchanged."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import REPO
from tuner.plan.dry_run import dry_run
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import planned_inventory
from tuner.spec.gpu_types import gpu_type
from tuner.spec.study_spec import load_spec

DATA = REPO / "tuner" / "serve" / "engines" / "data"
LLM_ARGS = json.loads((DATA / "trtllm-1.2.1-llm_args.json").read_text())
SERVER_ARGS = json.loads((DATA / "sglang-0.5.23-server_args.json").read_text())
CURATED = DATA / "trtllm-1.2.1-curated"
# Keys a study fixes for every trial, as NVIDIA's curated configs set them.
FIXED = {"trust_remote_code": True, "stream_interval": 20, "num_postprocess_workers": 4}


def trtllm_yaml(config: dict, gpu: str = "B200", args: dict | None = None) -> dict:
    settings = EngineSettings(executable="trtllm-serve", model="openai/gpt-oss-120b",
                              args=args or dict(FIXED), env={})
    plan = get_adapter("trtllm").launch_plan(
        config, settings, host="0.0.0.0", port=8000,
        inventory=planned_inventory(gpu_type(gpu), 8), devices=list(range(8)))
    assert plan.argv == ["trtllm-serve", "openai/gpt-oss-120b", "--host", "0.0.0.0", "--port",
                         "8000", "--backend", "pytorch", "--config", "extra-llm-api-config.yaml"]
    return yaml.safe_load(plan.files["extra-llm-api-config.yaml"])


def curated(name: str) -> dict:
    """A curated file as TensorRT-LLM 1.2.1 would accept it: its top-level
    kv_cache_free_gpu_memory_fraction is a trtllm-serve CLI option, not an LlmArgs field (the
    model forbids extra keys), so tuner writes it as kv_cache_config.free_gpu_memory_fraction."""
    data = yaml.safe_load((CURATED / name).read_text())
    fraction = data.pop("kv_cache_free_gpu_memory_fraction")
    data.setdefault("kv_cache_config", {})["free_gpu_memory_fraction"] = fraction
    return data


def test_the_curated_latency_config_is_a_trial_config():
    """TP8 EP1, batch 64, max_num_tokens 16384, TRTLLM MoE, stream_interval 20."""
    config = {"tensor_parallel_size": 8, "expert_parallel_size": 1, "enable_attention_dp": False,
              "moe_backend": "TRTLLM", "max_batch_size": 64, "max_num_tokens": 16384,
              "gpu_memory_fraction": 0.9}
    assert trtllm_yaml(config) == curated("gpt-oss-120b-latency.yaml")


def test_the_curated_throughput_config_is_a_trial_config():
    """TP2 EP2, attention DP with balance, batch 720, TRTLLM MoE."""
    config = {"tensor_parallel_size": 2, "expert_parallel_size": 2, "enable_attention_dp": True,
              "moe_backend": "TRTLLM", "max_batch_size": 720, "max_num_tokens": 16384,
              "gpu_memory_fraction": 0.9}
    assert trtllm_yaml(config) == curated("gpt-oss-120b-throughput.yaml")


def _keys_outside(data: dict, allowed_top: set, nested: dict) -> list[str]:
    bad = [k for k in data if k not in allowed_top]
    for section, value in data.items():
        if not isinstance(value, dict):
            continue
        if section == "speculative_config":
            allowed = set(nested[f"speculative_config.{value['decoding_type']}"]) | {
                "decoding_type"}
        else:
            allowed = set(nested.get(section, []))
        bad += [f"{section}.{k}" for k in value if k not in allowed]
    return bad


def sampled_plans(engine: str, gpu: str, n: int = 40):
    spec_path = REPO / "examples" / ("gpt-oss-120b-trtllm.yaml" if engine == "trtllm"
                                     else "gpt-oss-120b.yaml")
    _, planned = dry_run(load_spec(spec_path), spec_path, gpu=gpu, engine=engine, n_trials=n)
    return [p.plan for p in planned if p.plan is not None]


@pytest.mark.parametrize("gpu", ["H200", "B200"])
def test_every_trtllm_key_tuner_emits_exists_in_llm_args_1_2_1(gpu):
    top = set(LLM_ARGS["top_level_keys"])
    backends = set(LLM_ARGS["enums"]["moe_config.backend"])
    options = set(LLM_ARGS["serve_cli_options"])
    plans = sampled_plans("trtllm", gpu)
    assert len(plans) == 40
    for plan in plans:
        data = yaml.safe_load(plan.files["extra-llm-api-config.yaml"])
        assert _keys_outside(data, top, LLM_ARGS["nested"]) == []
        assert data["moe_config"]["backend"] in backends
        serve = plan.argv[plan.argv.index("trtllm-serve"):]
        assert {a for a in serve if a.startswith("--")} <= options
    assert _keys_outside(curated("gpt-oss-120b-throughput.yaml"), top, LLM_ARGS["nested"]) == []


@pytest.mark.parametrize("gpu", ["H200", "B200"])
def test_every_sglang_flag_tuner_emits_exists_in_server_args_0_5_23(gpu):
    flags = set(SERVER_ARGS["flags"])
    choices = SERVER_ARGS["choices"]
    plans = sampled_plans("sglang", gpu)
    assert len(plans) == 40
    for plan in plans:
        argv = plan.argv
        assert argv[1:3] == ["-m", "sglang.launch_server"]
        emitted = [a for a in argv[3:] if a.startswith("--")]
        assert set(emitted) <= flags, set(emitted) - flags
        for flag in ("--moe-runner-backend", "--kv-cache-dtype"):
            if flag in argv:
                assert argv[argv.index(flag) + 1] in choices[flag]


def test_reference_data_names_the_releases_the_adapters_target():
    from tuner.serve.engines import trtllm

    assert LLM_ARGS["release"] == f"v{trtllm.RELEASE}"
    assert SERVER_ARGS["release"].lstrip("v") == "0.5.23"
