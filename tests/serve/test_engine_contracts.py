"""Engine contracts: every plan tuner samples from the gpt-oss spaces is one the targeted engine
release starts. vLLM's plans go through vLLM 0.32's own MoE oracle (tests/serve/
vllm_moe_oracle.py); TensorRT-LLM's and SGLang's keys and flags must exist in their releases
(key lists derived from their source, tuner/serve/engines/data/), and NVIDIA's gpt-oss-120b
database configurations (tests/serve/data/trtllm-database/) come out of tuner as published."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import REPO
from tests.serve.vllm_moe_oracle import select
from tuner.plan.dry_run import dry_run
from tuner.serve.engines import EngineSettings, base, get_adapter
from tuner.serve.hardware import planned_inventory
from tuner.spec.gpu_types import gpu_type
from tuner.spec.model_shape import shape_by_name
from tuner.spec.study_spec import load_spec

DATA = REPO / "tuner" / "serve" / "engines" / "data"
LLM_ARGS = json.loads((DATA / "trtllm-1.2.1-llm_args.json").read_text())
SERVER_ARGS = json.loads((DATA / "sglang-0.5.23-server_args.json").read_text())
CURATED = DATA / "trtllm-1.2.1-curated"
DATABASE = REPO / "tests" / "serve" / "data" / "trtllm-database"
# Keys a study fixes for every trial, as NVIDIA's curated configs set them.
FIXED = {"trust_remote_code": True, "stream_interval": 20, "num_postprocess_workers": 4}
SPECS = {"vllm": "gpt-oss-120b.yaml", "trtllm": "gpt-oss-120b-trtllm.yaml",
         "sglang": "gpt-oss-120b-sglang.yaml"}
GPUS = ["H100-SXM", "H200", "B200", "GB200"]
N = 200


def sampled_plans(engine: str, gpu: str, n: int = N):
    spec_path = REPO / "examples" / SPECS[engine]
    _, planned = dry_run(load_spec(spec_path), spec_path, gpu=gpu, engine=None, n_trials=n)
    return [p for p in planned if p.plan is not None]


# ----------------------------------------------------------------- what each engine checks


def vllm_breaches(monkeypatch, trial, arch: str) -> list[str]:
    config = yaml.safe_load(trial.plan.files["config.yaml"])
    ep = trial.plan.gpus if config.get("enable-expert-parallel") else 1
    try:
        _, runs_at = select(monkeypatch, arch=arch, engine_config=config, ep=ep)
    except ValueError as e:
        return [f"vLLM refuses {config.get('moe-backend')}: {e}"]
    wanted = trial.params.get("moe_activation", "bf16")
    return [] if (runs_at or "bf16") == wanted else [
        f"{config.get('moe-backend')} runs {runs_at or 'bf16'}, not the {wanted} searched"]


def _keys_outside(data: dict, allowed_top: set, nested: dict) -> list[str]:
    bad = [k for k in data if k not in allowed_top]
    for section, value in data.items():
        if not isinstance(value, dict) or section == "env_overrides":  # free-form env names
            continue
        if section == "speculative_config":
            allowed = set(nested[f"speculative_config.{value['decoding_type']}"]) | {
                "decoding_type"}
        else:
            allowed = set(nested.get(section, []))
        bad += [f"{section}.{k}" for k in value if k not in allowed]
    return bad


def trtllm_breaches(trial, arch: str) -> list[str]:
    data = yaml.safe_load(trial.plan.files["extra-llm-api-config.yaml"])
    bad = _keys_outside(data, set(LLM_ARGS["top_level_keys"]), LLM_ARGS["nested"])
    if data["moe_config"]["backend"] not in LLM_ARGS["enums"]["moe_config.backend"]:
        bad.append(f"moe_config.backend {data['moe_config']['backend']}")
    if arch == "hopper" and data.get("kv_cache_config", {}).get("dtype", "auto") != "auto":
        bad.append("fp8 KV cache on Hopper")  # NVIDIA's perf overview: use auto
    serve = trial.plan.argv[trial.plan.argv.index("trtllm-serve"):]
    bad += [a for a in serve if a.startswith("--") and a not in LLM_ARGS["serve_cli_options"]]
    return bad


def sglang_breaches(trial, arch: str) -> list[str]:
    argv = trial.plan.argv
    bad = [a for a in argv[3:] if a.startswith("--") and a not in SERVER_ARGS["flags"]]
    for flag in ("--moe-runner-backend", "--kv-cache-dtype"):
        if flag in argv and argv[argv.index(flag) + 1] not in SERVER_ARGS["choices"][flag]:
            bad.append(f"{flag} {argv[argv.index(flag) + 1]}")
    ep = int(argv[argv.index("--ep-size") + 1]) if "--ep-size" in argv else 1
    if "triton_kernel" in argv and ep > 1:  # server_args asserts ep_size == 1 for it
        bad.append(f"triton_kernel with EP {ep}")
    return bad


def breaches(monkeypatch, engine: str, trials, gpu: str) -> list[str]:
    arch = gpu_type(gpu).arch
    out = []
    for trial in trials:
        found = vllm_breaches(monkeypatch, trial, arch) if engine == "vllm" else \
            trtllm_breaches(trial, arch) if engine == "trtllm" else sglang_breaches(trial, arch)
        out += [f"trial {trial.number}: {b}" for b in found]
    return out


@pytest.mark.usefixtures("vllm_installed")
@pytest.mark.parametrize("engine", sorted(SPECS))
@pytest.mark.parametrize("gpu", GPUS)
def test_every_sampled_plan_passes_its_engines_contract(monkeypatch, engine, gpu):
    trials = sampled_plans(engine, gpu)
    assert len(trials) == N
    assert breaches(monkeypatch, engine, trials, gpu) == []


@pytest.mark.usefixtures("vllm_installed")
def test_reintroducing_flashinfer_cutlass_bf16_on_sm100_fails_the_contract(monkeypatch):
    table = base._moe_backend_table()
    wrong = {**table, "vllm": {**table["vllm"],
                               "flashinfer_cutlass": {"hopper": ["bf16"],
                                                      "blackwell": ["bf16", "mxfp8"]}}}
    monkeypatch.setattr(base, "_moe_backend_table", lambda: wrong)
    found = breaches(monkeypatch, "vllm", sampled_plans("vllm", "B200"), "B200")
    assert found and all("FLASHINFER_CUTLASS_MXFP4_BF16" in b for b in found)


def test_gb200_plans_fit_one_compute_tray():
    for engine in SPECS:
        assert {t.plan.gpus for t in sampled_plans(engine, "GB200", 40)} <= {1, 2, 4}


# ----------------------------------------------------------------- NVIDIA's configurations

B200, H200 = gpu_type("B200"), gpu_type("H200")


def trtllm_yaml(config: dict, gpu: str = "B200", args: dict | None = None) -> dict:
    settings = EngineSettings(executable="trtllm-serve", model="openai/gpt-oss-120b",
                              args=args or dict(FIXED), env={})
    adapter = get_adapter("trtllm")
    assert adapter.infeasibility(config, shape_by_name("gpt-oss-120b"), gpu_type(gpu),
                                 settings) is None
    plan = adapter.launch_plan(config, settings, host="0.0.0.0", port=8000,
                               inventory=planned_inventory(gpu_type(gpu), 8),
                               devices=list(range(8)))
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


def as_tuner_writes(published: dict) -> dict:
    """A database file with the differences that change nothing the engine does, named:
    - `backend: pytorch` (a trtllm-serve option, not an LlmArgs field in 1.2.1) is on tuner's
      command line (`--backend pytorch`, asserted in trtllm_yaml);
    - `enable_attention_dp` left out means false: tuner always writes it;
    - the batch limit: the files set either `max_batch_size` or `cuda_graph_config.
      max_batch_size` and leave the other to TensorRT-LLM (graphs up to the batch limit; the
      scheduler's 2048 above a graph limit no client of that concurrency reaches); tuner
      writes the searched max_batch_size to both."""
    data = json.loads(json.dumps(published))
    assert data.pop("backend", "pytorch") == "pytorch"
    data.setdefault("enable_attention_dp", False)
    graphs = data["cuda_graph_config"]
    batch = data.get("max_batch_size", graphs.get("max_batch_size"))
    data["max_batch_size"] = graphs["max_batch_size"] = batch
    return data


# File -> (GPU, the trial configuration; the study's fixed keys are the file's own).
DATABASE_TRIALS = {
    "B200-1k1k_tp8_conc64.yaml": ("B200", {
        "tensor_parallel_size": 8, "expert_parallel_size": 8, "enable_attention_dp": False,
        "moe_backend": "TRTLLM", "kv_cache_dtype": "fp8", "max_batch_size": 64}),
    "B200-1k1k_tp4_conc1280.yaml": ("B200", {
        "tensor_parallel_size": 4, "expert_parallel_size": 4, "enable_attention_dp": False,
        "moe_backend": "TRTLLM", "kv_cache_dtype": "fp8", "max_batch_size": 1280}),
    "B200-1k1k_tp8_conc4096.yaml": ("B200", {
        "tensor_parallel_size": 8, "expert_parallel_size": 8, "enable_attention_dp": True,
        "attention_dp_batching_wait_iters": 0, "attention_dp_timeout_iters": 60,
        "moe_backend": "CUTLASS", "kv_cache_dtype": "fp8", "max_batch_size": 4096}),
    "H200-1k1k_tp8_conc64.yaml": ("H200", {
        "tensor_parallel_size": 8, "expert_parallel_size": 8, "enable_attention_dp": False,
        "moe_backend": "TRITON", "kv_cache_dtype": "auto", "max_batch_size": 64}),
    "H200-1k1k_tp8_conc1536.yaml": ("H200", {
        "tensor_parallel_size": 8, "expert_parallel_size": 8, "enable_attention_dp": False,
        "moe_backend": "TRITON", "max_batch_size": 1536}),
    "H200-1k1k_tp4_conc128.yaml": ("H200", {
        "tensor_parallel_size": 4, "expert_parallel_size": 4, "enable_attention_dp": False,
        "moe_backend": "TRITON", "max_batch_size": 128}),
}
# Searched in every one of them: memory fraction 0.85, 20000 batched tokens.
COMMON = {"gpu_memory_fraction": 0.85, "max_num_tokens": 20000}
FIXED_KEYS = ("env_overrides", "print_iter_log", "stream_interval", "num_postprocess_workers",
              "trust_remote_code", "max_seq_len")


def test_the_database_copies_name_their_source_commit():
    sources = yaml.safe_load((DATABASE / "sources.yaml").read_text())
    assert set(sources) == set(DATABASE_TRIALS) == {p.name for p in DATABASE.glob("*0*.yaml")}
    for name, (path, commit) in sources.items():
        assert path.endswith(name.split("-", 1)[1]) and f"/{name.split('-')[0]}/" in path
        assert len(commit) == 40
    assert {gpu for gpu, _ in DATABASE_TRIALS.values()} == {"B200", "H200"}


@pytest.mark.parametrize("name", sorted(DATABASE_TRIALS))
def test_nvidias_database_config_is_a_trial_config(name):
    gpu, config = DATABASE_TRIALS[name]
    published = yaml.safe_load((DATABASE / name).read_text())
    fixed = {k: published[k] for k in FIXED_KEYS}  # what a study spec's engine.args holds
    assert trtllm_yaml({**config, **COMMON}, gpu, fixed) == as_tuner_writes(published)


def test_the_database_b200_dep_configs_use_cutlass_and_h200_ones_auto_kv():
    # The facts tuner/data rests on: CUTLASS on Blackwell, no fp8 KV on Hopper.
    loaded = {n: yaml.safe_load((DATABASE / n).read_text()) for n in DATABASE_TRIALS}
    assert loaded["B200-1k1k_tp8_conc4096.yaml"]["moe_config"]["backend"] == "CUTLASS"
    for name, data in loaded.items():
        if name.startswith("H200"):
            assert data["kv_cache_config"].get("dtype", "auto") == "auto"


def test_reference_data_names_the_releases_the_adapters_target():
    from tuner.serve.engines import trtllm

    assert LLM_ARGS["release"] == f"v{trtllm.RELEASE}"
    assert SERVER_ARGS["release"].lstrip("v") == "0.5.23"
