"""vLLM: `vllm serve MODEL --config config.yaml`, one code path for the CUDA and the CPU builds.

The trial's searched parameters and the study's fixed engine args go into one YAML config file
(keys are vLLM's long flag names; nested mappings become JSON, as vLLM's own loader does), and
only host, port and the switches turned off stay on the command line. The file and that command
are what gets exported: a deploy runs the very configuration that was measured. Flags as of vLLM
0.32.0 (checked against the parser `vllm serve` itself uses, in tests/serve/test_vllm_adapter.py).

A switch set to false cannot go in the file: 0.32's loader turns `key: false` into `--no-key`
only when its top-level parser knows that flag, and under `vllm serve` it does not (the flags
belong to the subcommand), so it drops the key without a word. `enable-prefix-caching: false`
in a config file leaves prefix caching on. So each false switch is `--no-key` on the command line.
"""

from __future__ import annotations

from typing import Any

from tuner.serve.cpu_layout import plan_layout
from tuner.serve.engines.base import EngineSettings, LaunchPlan, backend_infeasibility
from tuner.serve.engines.rules import (
    cpu_kv_cache_dtype_infeasibility,
    single_rank_memory_infeasibility,
)
from tuner.serve.engines.vllm_parser import rejection
from tuner.serve.hardware import Inventory, cpu_flags
from tuner.spec.gpu_types import GpuType
from tuner.spec.model_shape import ModelShape

CONFIG_FILE = "config.yaml"

# Canonical parameter -> vLLM flag (without dashes). Speculation is assembled separately.
FLAGS = {
    "tensor_parallel_size": "tensor-parallel-size",
    "data_parallel_size": "data-parallel-size",
    "enable_expert_parallel": "enable-expert-parallel",
    "moe_backend": "moe-backend",
    "max_batch_size": "max-num-seqs",
    "max_num_tokens": "max-num-batched-tokens",
    "kv_cache_dtype": "kv-cache-dtype",
    "gpu_memory_fraction": "gpu-memory-utilization",
}
SPECULATIVE = ("speculative_method", "num_speculative_tokens", "prompt_lookup_max")
# 0.32 picks the MoE kernels' activation precision from --quantization-config (oracle/mxfp4.py
# _user_moe_activation_override); the checkpoint's own default (BF16 for gpt-oss) needs no key.
MOE_ACTIVATION = "moe_activation"


class VllmAdapter:
    name = "vllm"
    default_executable = "vllm"
    supported_parameters = frozenset(FLAGS) | frozenset(SPECULATIVE) | {MOE_ACTIVATION}
    # The CPU build's rank binding: the trial's cores. A deploy without it gets vLLM's own
    # (a NUMA node per rank, a core of each kept for the frontend); a user's setting passes on.
    slot_env = frozenset({"VLLM_CPU_OMP_THREADS_BIND"})

    def world_size(self, config: dict[str, Any]) -> int:
        return int(config.get("tensor_parallel_size", 1)) * int(config.get("data_parallel_size", 1))

    def max_in_flight(self, config: dict[str, Any], settings: EngineSettings) -> int | None:
        # max-num-seqs is per engine core: each data-parallel rank schedules its own batch.
        batch = config.get("max_batch_size", settings.args.get("max-num-seqs"))
        return None if batch is None else int(batch) * int(config.get("data_parallel_size", 1))

    def expert_parallel_width(self, config: dict[str, Any]) -> int:
        # A switch: the experts are spread over every TP x DP rank ("DEP2" = DP2 + EP).
        return self.world_size(config) if config.get("enable_expert_parallel") else 1

    def infeasibility(self, config: dict[str, Any], shape: ModelShape, gpu: GpuType,
                      settings: EngineSettings) -> str | None:
        if config.get("speculative_method") == "eagle3" and not settings.draft_model:
            return "EAGLE-3 needs a draft model: set engine.draft_model in the spec"
        if gpu.arch != "cpu":
            return backend_infeasibility(self.name, config.get("moe_backend"), gpu.arch,
                                         config.get(MOE_ACTIVATION)) or \
                single_rank_memory_infeasibility(self.name, config, shape, gpu)
        if config.get("moe_backend") or config.get(MOE_ACTIVATION, "bf16") != "bf16":
            return "vLLM's CPU build has one MoE kernel: moe_backend is for GPUs"
        return cpu_kv_cache_dtype_infeasibility(self.name, config.get("kv_cache_dtype"),
                                                cpu_flags(), shape.head_dim)

    def engine_config(self, config: dict[str, Any], settings: EngineSettings) -> dict[str, Any]:
        """The YAML for `vllm serve --config`: fixed args first, then the trial's parameters.
        CUDA-graph sizes are left to vLLM: they count tokens, and vLLM sizes them for the batch
        limit and the draft length together (a fixed cap turns that off)."""
        out: dict[str, Any] = dict(settings.args)
        for canonical, flag in FLAGS.items():
            if canonical in config:
                out[flag] = config[canonical]
        spec = speculative_config(config, settings.draft_model)
        if spec is not None:
            out["speculative-config"] = spec
        if settings.prefix_caching:
            out["enable-prefix-caching"] = True
        if config.get(MOE_ACTIVATION, "bf16") != "bf16":
            out["quantization-config"] = {"moe": {"activation": config[MOE_ACTIVATION]}}
        return out

    def placement_env(self, config: dict[str, Any], inventory: Inventory, devices: list[int]):
        world = self.world_size(config)
        if inventory.kind == "gpu":
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices[:world]))}
        # vLLM's CPU build binds each rank's OpenMP threads to the cores listed per rank: without
        # it TP > 1 fails with "Not enough allowed NUMA nodes", and a TP1 server would spread over
        # every core, so its figure per device would depend on what else runs on the node. The
        # ranks take the slot's first cores; the frontend the rest (tuner.serve.cpu_layout).
        ranks = plan_layout(devices, world, inventory.per_rank).ranks
        return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(_core_range(list(r)) for r in ranks)}

    def compute_apart(self, config: dict[str, Any], settings: EngineSettings) -> bool:
        # With multiprocessing off, a one-rank server's engine core runs the model itself (the
        # uni executor): compute and scheduler share a process.
        one_process = settings.env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        return not (one_process and self.world_size(config) == 1)

    def command_rejection(self, plan: LaunchPlan, say) -> str | None:
        return rejection(plan, say)

    def launch_plan(
        self,
        config: dict[str, Any],
        settings: EngineSettings,
        *,
        host: str,
        port: int,
        inventory: Inventory,
        devices: list[int],
        workdir: str | None = None,
    ) -> LaunchPlan:
        import yaml

        engine_config = self.engine_config(config, settings)
        off = [key for key, value in engine_config.items() if value is False]
        kept = {key: value for key, value in engine_config.items() if key not in off}
        files = {CONFIG_FILE: yaml.safe_dump(kept, sort_keys=False)}
        argv = [settings.executable, "serve", settings.model, "--config", CONFIG_FILE,
                *(f"--no-{key}" for key in off), "--host", host, "--port", str(port)]
        env = {**settings.env, **self.placement_env(config, inventory, devices)}
        return LaunchPlan(
            engine=self.name, argv=argv, env=env, files=files, host=host, port=port,
            model=settings.model, gpus=inventory.devices_for(self.world_size(config)),
        )

    def launch_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        argv = list(plan.argv)
        argv[argv.index("--config") + 1] = f"{config_dir.rstrip('/')}/{CONFIG_FILE}"
        return argv

    def engine_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        return self.launch_command(plan, config_dir)


def speculative_config(config: dict[str, Any], draft_model: str | None) -> dict[str, Any] | None:
    method = config.get("speculative_method", "none")
    if method in (None, "none"):
        return None
    out: dict[str, Any] = {"method": method}
    if method == "eagle3":
        out["model"] = draft_model
        out["draft_tensor_parallel_size"] = 1
    if "num_speculative_tokens" in config:
        out["num_speculative_tokens"] = int(config["num_speculative_tokens"])
    if "prompt_lookup_max" in config:
        out["prompt_lookup_max"] = int(config["prompt_lookup_max"])
    return out


def _core_range(cores: list[int]) -> str:
    if cores == list(range(cores[0], cores[-1] + 1)) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))
