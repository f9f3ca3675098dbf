"""SGLang 0.5.23: `python -m sglang.launch_server --model-path MODEL ...`, every option a flag.

Its wheel needs CUDA, so here it is checked like TensorRT-LLM: every flag tuner emits must be one
of the targeted release's server_args (tuner/serve/engines/data/). The launch has no config
file: the exported launch command is the whole configuration.
"""

from __future__ import annotations

from typing import Any

from tuner.serve.engines.base import EngineSettings, LaunchPlan, gpu_server_infeasibility
from tuner.serve.engines.rules import expert_parallel_infeasibility
from tuner.serve.hardware import Inventory
from tuner.spec.gpu_types import GpuType
from tuner.spec.model_shape import ModelShape
from tuner.spec.space import DEFAULT_DRAFT_LEN

# Canonical parameter -> launch_server flag.
FLAGS = {
    "tensor_parallel_size": "--tp-size",
    "expert_parallel_size": "--ep-size",
    "moe_backend": "--moe-runner-backend",
    "max_batch_size": "--max-running-requests",
    "max_num_tokens": "--chunked-prefill-size",
    "kv_cache_dtype": "--kv-cache-dtype",
    "gpu_memory_fraction": "--mem-fraction-static",
}


class SglangAdapter:
    name = "sglang"
    default_executable = "python3"
    supported_parameters = frozenset(FLAGS) | {"enable_attention_dp", "speculative_method",
                                               "num_speculative_tokens"}
    slot_env: frozenset[str] = frozenset()  # GPU ids are rewritten, not dropped

    def world_size(self, config: dict[str, Any]) -> int:
        return int(config.get("tensor_parallel_size", 1))

    def compute_apart(self, config: dict[str, Any], settings: EngineSettings) -> bool:
        return True  # GPU ranks are processes of their own

    def command_rejection(self, plan: LaunchPlan, say) -> str | None:
        return None  # its parser needs CUDA to import: the first start says what it rejects

    def max_in_flight(self, config: dict[str, Any], settings: EngineSettings) -> int | None:
        # --max-running-requests bounds the whole server.
        fixed = {k.lstrip("-"): v for k, v in settings.args.items()}.get("max-running-requests")
        batch = config.get("max_batch_size", fixed)
        return None if batch is None else int(batch)

    def expert_parallel_width(self, config: dict[str, Any]) -> int:
        return int(config.get("expert_parallel_size", 1))

    def infeasibility(self, config: dict[str, Any], shape: ModelShape, gpu: GpuType,
                      settings: EngineSettings) -> str | None:
        tp, ep = self.world_size(config), self.expert_parallel_width(config)
        if config.get("enable_attention_dp") and tp == 1:
            return "attention data parallel needs more than one GPU"
        return gpu_server_infeasibility(self.name, "SGLang", config, gpu, settings, tp, ep) \
            or expert_parallel_infeasibility(self.name, config.get("moe_backend"), ep)

    def arguments(self, config: dict[str, Any], settings: EngineSettings) -> list[str]:
        args: list[str] = []
        for canonical, flag in FLAGS.items():
            if canonical in config:
                args += [flag, str(config[canonical])]
        if config.get("enable_attention_dp"):
            # DP attention over every rank of the server, experts over --ep-size (DEP).
            args += ["--enable-dp-attention", "--dp-size", str(self.world_size(config))]
        if "max_batch_size" in config:
            # 0.5.23 split --cuda-graph-max-bs: decode graphs up to the batch limit.
            args += ["--cuda-graph-max-bs-decode", str(config["max_batch_size"])]
        if config.get("speculative_method") == "eagle3":
            k = int(config.get("num_speculative_tokens", DEFAULT_DRAFT_LEN))
            # A chain of k drafted tokens: k steps, top-1 per step, k + 1 tokens verified.
            args += ["--speculative-algorithm", "EAGLE3",
                     "--speculative-draft-model-path", str(settings.draft_model),
                     "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(k + 1)]
        for key, value in settings.args.items():  # the study's fixed flags, as `flag: value`
            flag = key if key.startswith("--") else f"--{key}"
            if value is True:
                args.append(flag)
            elif value not in (False, None):
                args += [flag, str(value)]
        return args

    def launch_plan(self, config: dict[str, Any], settings: EngineSettings, *, host: str,
                    port: int, inventory: Inventory, devices: list[int],
                    workdir: str | None = None) -> LaunchPlan:
        world = self.world_size(config)
        argv = [settings.executable, "-m", "sglang.launch_server", "--model-path", settings.model,
                "--host", host, "--port", str(port), *self.arguments(config, settings)]
        env = dict(settings.env)
        if inventory.kind == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices[:world]))
        return LaunchPlan(engine=self.name, argv=argv, env=env, files={}, host=host, port=port,
                          model=settings.model, gpus=world, version_path=None)

    def launch_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        return list(plan.argv)

    def engine_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        return self.launch_command(plan, config_dir)
