"""The vLLM adapter: trial parameters -> `vllm serve --config` YAML, env and argv.

The contract test feeds the emitted command and YAML to the installed vLLM's own argument parser,
the one `vllm serve` uses: every flag tuner writes must be one vLLM accepts, with the value tuner
meant.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from tests.vllm_cli import parse_vllm_serve
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import Inventory
from tuner.spec.gpu_types import gpu_type
from tuner.spec.model_shape import shape_by_name

CPU2 = Inventory(kind="cpu", type="cpu", devices=(0, 1), description="2 cores", host="h")
GPU8 = Inventory(kind="gpu", type="H200", devices=tuple(range(8)), description="8 GPUs", host="h")
SETTINGS = EngineSettings(executable="vllm", model="/models/tiny",
                          args={"max-model-len": 512, "enforce-eager": True,
                                "enable-prefix-caching": False},
                          env={"VLLM_CPU_KVCACHE_SPACE": "1"})
CONFIG = {"tensor_parallel_size": 2, "data_parallel_size": 1, "enable_expert_parallel": True,
          "max_batch_size": 16, "max_num_tokens": 2048, "speculative_method": "ngram",
          "num_speculative_tokens": 4}


def plan(config=CONFIG, inventory=CPU2, devices=(0, 1)):
    return get_adapter("vllm").launch_plan(config, SETTINGS, host="127.0.0.1", port=8123,
                                           inventory=inventory, devices=list(devices))


def test_parameters_become_vllm_config_keys_and_only_host_port_and_switches_off_stay_outside():
    p = plan()
    assert p.argv == ["vllm", "serve", "/models/tiny", "--config", "config.yaml",
                      "--no-enable-prefix-caching", "--host", "127.0.0.1", "--port", "8123"]
    assert yaml.safe_load(p.files["config.yaml"]) == {
        "max-model-len": 512, "enforce-eager": True,
        "tensor-parallel-size": 2, "data-parallel-size": 1, "enable-expert-parallel": True,
        "max-num-seqs": 16, "max-num-batched-tokens": 2048,
        "speculative-config": {"method": "ngram", "num_speculative_tokens": 4},
    }
    assert p.gpus == 2 and p.model == "/models/tiny"


def test_no_speculative_config_without_speculation():
    p = plan({"tensor_parallel_size": 1, "speculative_method": "none"})
    assert "speculative-config" not in yaml.safe_load(p.files["config.yaml"])


def test_cpu_ranks_get_their_own_cores_and_gpus_their_own_devices():
    assert plan().env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    # TP1 is bound to one rank's cores too, not spread over the node: its figure is per core.
    tp1 = plan({"tensor_parallel_size": 1})
    assert tp1.env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and tp1.gpus == 1
    gpu = plan({"tensor_parallel_size": 4}, GPU8, devices=[4, 5, 6, 7])
    assert gpu.env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert gpu.env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the spec's env is kept


def test_the_launch_command_points_at_the_exported_config():
    adapter = get_adapter("vllm")
    assert adapter.launch_command(plan(), "/etc/tuner/")[3:5] == ["--config",
                                                                  "/etc/tuner/config.yaml"]


@pytest.mark.usefixtures("vllm_installed")
def test_vllms_own_parser_accepts_every_flag_tuner_emits(tmp_path):
    p = plan()
    args = parse_vllm_serve(p, tmp_path)
    assert args.model_tag == p.model and (args.host, args.port) == (p.host, p.port)
    assert args.tensor_parallel_size == 2
    assert args.data_parallel_size == 1
    assert args.enable_expert_parallel is True
    assert args.max_num_seqs == 16
    assert args.max_num_batched_tokens == 2048
    assert args.enable_prefix_caching is False  # not None: vLLM's default would turn it on
    assert args.enforce_eager is True
    assert args.max_model_len == 512
    assert args.speculative_config == {"method": "ngram", "num_speculative_tokens": 4}

    bad = replace(p, files={"config.yaml": "max-num-seqz: 16\n"})
    with pytest.raises(SystemExit):  # the parser really refuses what it does not know
        parse_vllm_serve(bad, tmp_path)


@pytest.mark.usefixtures("vllm_installed")
def test_a_switch_turned_off_in_vllms_config_file_is_dropped_so_tuner_puts_it_on_the_command_line(
        tmp_path):
    """Why false switches are `--no-...` flags: in the file, `vllm serve` 0.32 ignores them."""
    p = plan()
    in_file = replace(p, argv=[a for a in p.argv if not a.startswith("--no-")],
                      files={"config.yaml": p.files["config.yaml"]
                             + "enable-prefix-caching: false\n"})
    assert parse_vllm_serve(in_file, tmp_path).enable_prefix_caching is None  # vLLM: on
    assert parse_vllm_serve(p, tmp_path).enable_prefix_caching is False


@pytest.mark.usefixtures("vllm_installed")
@pytest.mark.parametrize("backend", ["triton", "flashinfer_cutlass", "flashinfer_trtllm", "marlin"])
def test_vllms_own_parser_accepts_the_gpu_flags(tmp_path, backend):
    settings = EngineSettings(executable="vllm", model="openai/gpt-oss-120b",
                              args={"max-model-len": 10240, "stream-interval": 20},
                              env={}, draft_model="nvidia/gpt-oss-120b-Eagle3-v3")
    config = {"tensor_parallel_size": 2, "data_parallel_size": 2, "enable_expert_parallel": True,
              "moe_backend": backend, "moe_activation": "mxfp8",
              "max_batch_size": 256, "max_num_tokens": 8192,
              "kv_cache_dtype": "fp8", "gpu_memory_fraction": 0.9,
              "speculative_method": "eagle3", "num_speculative_tokens": 3}
    p = get_adapter("vllm").launch_plan(config, settings, host="0.0.0.0", port=8000,
                                        inventory=GPU8, devices=[0, 1, 2, 3])
    assert p.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and p.gpus == 4
    args = parse_vllm_serve(p, tmp_path)
    assert (args.moe_backend, args.kv_cache_dtype, args.gpu_memory_utilization) == (
        backend, "fp8", 0.9)
    # Graph sizes count tokens (batch x (1 + draft) when speculating): vLLM sizes them itself.
    assert args.max_cudagraph_capture_size is None
    assert args.stream_interval == 20
    from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp8Dynamic

    assert args.quantization_config.moe.activation == kMxfp8Dynamic  # vLLM's own parse
    assert args.speculative_config == {
        "method": "eagle3", "model": "nvidia/gpt-oss-120b-Eagle3-v3",
        "draft_tensor_parallel_size": 1, "num_speculative_tokens": 3}


def test_a_cpu_rank_of_several_cores_binds_them_all_and_counts_them_as_its_devices():
    four = replace(CPU2, devices=(0, 1, 2, 3), per_rank=2)
    tp2 = plan({"tensor_parallel_size": 2}, four, devices=(0, 1, 2, 3))
    assert tp2.env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1|2-3" and tp2.gpus == 4
    tp1 = plan({"tensor_parallel_size": 1}, four, devices=(2, 3))
    assert tp1.env["VLLM_CPU_OMP_THREADS_BIND"] == "2-3" and tp1.gpus == 2


# ----------------------------------------------------------------- FP8 KV cache on a CPU

AVX512 = frozenset({"avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq"})
AVX2_ONLY = frozenset({"avx2", "fma"})


def cpu_reason(monkeypatch, flags, kv, head_dim=64):
    monkeypatch.setattr("tuner.serve.engines.vllm.cpu_flags", lambda: flags)
    shape = replace(shape_by_name("gpt-oss-20b"), head_dim=head_dim)
    return get_adapter("vllm").infeasibility({"kv_cache_dtype": kv}, shape, gpu_type("cpu"),
                                             SETTINGS)


@pytest.mark.parametrize("kv", ["fp8", "fp8_e4m3", "fp8_e5m2"])
def test_an_fp8_kv_cache_on_a_cpu_without_avx512_or_amx_is_refused_before_launch(monkeypatch, kv):
    reason = cpu_reason(monkeypatch, AVX2_ONLY, kv)
    assert reason == (f"vllm's CPU build runs KV cache {kv} only on x86 with AVX-512 or AMX, "
                      "which this CPU lacks: use kv_cache_dtype auto on it")


def test_an_fp8_kv_cache_runs_on_avx512_or_amx(monkeypatch):
    assert cpu_reason(monkeypatch, AVX512, "fp8_e5m2") is None
    assert cpu_reason(monkeypatch, frozenset({"avx2", "amx_tile"}), "fp8_e5m2") is None
    # Part of AVX-512 is not enough: torch's check (and so vLLM's) wants all four.
    assert cpu_reason(monkeypatch, frozenset({"avx512f", "avx512vl"}), "fp8") is not None


def test_the_default_kv_cache_needs_no_instruction_set(monkeypatch):
    assert cpu_reason(monkeypatch, AVX2_ONLY, "auto") is None
    assert cpu_reason(monkeypatch, AVX2_ONLY, None) is None


def test_an_fp8_kv_cache_on_a_cpu_needs_a_head_size_divisible_by_32(monkeypatch):
    assert "not 48" in cpu_reason(monkeypatch, AVX512, "fp8", head_dim=48)
    assert cpu_reason(monkeypatch, AVX512, "fp8", head_dim=64) is None


def test_this_machines_flags_say_what_torchs_own_check_says():
    """vLLM asks torch (`torch.cpu._is_avx512_supported`, `_is_amx_tile_supported`); the
    adapter reads /proc/cpuinfo, so that a plan needs no torch. On this machine they agree."""
    import torch

    from tuner.serve.hardware import cpu_flags

    flags = cpu_flags()
    assert ({"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags) == \
        torch.cpu._is_avx512_supported()
    assert ("amx_tile" in flags) == torch.cpu._is_amx_tile_supported()
