"""TensorRT-LLM: `trtllm-serve MODEL --backend pytorch --config FILE`, targeting release 1.2.1.

In 1.2.1 the LLM-API YAML given with --config overrides the command line, and NVIDIA's curated
gpt-oss configs put everything there (parallelism and batch limits too), so tuner does the same:
the command line carries only host, port and backend. Every key tuner writes exists in that
release's LlmArgs (tuner/serve/engines/data/trtllm-1.2.1-llm_args.json; checked in the tests). The
engine runs as a local executable or inside a container (engine.container in the spec), since
that is how most users get TensorRT-LLM.
"""

from __future__ import annotations

from typing import Any

from tuner.serve.engines.base import (
    EngineSettings,
    LaunchPlan,
    container_argv,
    gpu_server_infeasibility,
)
from tuner.serve.engines.rules import kv_cache_dtype_infeasibility
from tuner.serve.hardware import Inventory
from tuner.spec.gpu_types import GpuType
from tuner.spec.model_shape import ModelShape
from tuner.spec.space import DEFAULT_DRAFT_LEN

RELEASE = "1.2.1"
CONFIG_FILE = "extra-llm-api-config.yaml"
CONTAINER_DIR = "/tuner"  # where the trial directory is mounted inside a container

# Canonical parameter -> top-level LlmArgs key.
KEYS = {
    "max_batch_size": "max_batch_size",
    "max_num_tokens": "max_num_tokens",
    "tensor_parallel_size": "tensor_parallel_size",
    "expert_parallel_size": "moe_expert_parallel_size",
}
# Attention-DP balancing: NVIDIA's curated throughput config waits 50 iterations with timeout 1,
# its B200 database DEP configs 0 and 60: searched as two parameters, the curated values where not.
ATTENTION_DP_BALANCE = {"enable_balance": True, "batching_wait_iters": 50, "timeout_iters": 1}
ATTENTION_DP_KEYS = {"attention_dp_batching_wait_iters": "batching_wait_iters",
                     "attention_dp_timeout_iters": "timeout_iters"}


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) \
            else v
    return out


class TrtllmAdapter:
    name = "trtllm"
    default_executable = "trtllm-serve"
    supported_parameters = frozenset(KEYS) | frozenset(ATTENTION_DP_KEYS) | {
        "enable_attention_dp", "moe_backend", "kv_cache_dtype", "gpu_memory_fraction",
        "speculative_method", "num_speculative_tokens"}
    slot_env: frozenset[str] = frozenset()  # GPU ids are rewritten, not dropped

    def world_size(self, config: dict[str, Any]) -> int:
        return int(config.get("tensor_parallel_size", 1))  # ep and attention DP subdivide it

    def compute_apart(self, config: dict[str, Any], settings: EngineSettings) -> bool:
        return True  # GPU ranks are processes of their own

    def command_rejection(self, plan: LaunchPlan, say) -> str | None:
        return None  # its parser needs CUDA to import: the first start says what it rejects

    def max_in_flight(self, config: dict[str, Any], settings: EngineSettings) -> int | None:
        # With attention DP every rank holds a batch of max_batch_size; without, the server one.
        batch = config.get("max_batch_size", settings.args.get("max_batch_size"))
        ranks = self.world_size(config) if config.get("enable_attention_dp") else 1
        return None if batch is None else int(batch) * ranks

    def expert_parallel_width(self, config: dict[str, Any]) -> int:
        return int(config.get("expert_parallel_size", 1))

    def infeasibility(self, config: dict[str, Any], shape: ModelShape, gpu: GpuType,
                      settings: EngineSettings) -> str | None:
        tp, ep = self.world_size(config), self.expert_parallel_width(config)
        if config.get("enable_attention_dp") and tp == 1:
            return "attention data parallel needs more than one GPU"
        return gpu_server_infeasibility(self.name, "TensorRT-LLM", config, gpu, settings, tp, ep) \
            or kv_cache_dtype_infeasibility(self.name, config.get("kv_cache_dtype"), gpu.arch)

    def engine_config(self, config: dict[str, Any], settings: EngineSettings) -> dict[str, Any]:
        """The LLM-API YAML: the trial's parameters over the study's fixed keys."""
        out: dict[str, Any] = {KEYS[k]: config[k] for k in KEYS if k in config}
        adp = bool(config.get("enable_attention_dp", False))
        out["enable_attention_dp"] = adp
        if adp:
            out["attention_dp_config"] = {**ATTENTION_DP_BALANCE, **{
                key: int(config[k]) for k, key in ATTENTION_DP_KEYS.items() if k in config}}
        if "max_batch_size" in config:
            # Capture graphs up to the batch limit, padding odd batch sizes up to a captured one.
            out["cuda_graph_config"] = {"enable_padding": True,
                                        "max_batch_size": int(config["max_batch_size"])}
        if "moe_backend" in config:
            out["moe_config"] = {"backend": config["moe_backend"]}
        kv: dict[str, Any] = {}
        if "kv_cache_dtype" in config:
            kv["dtype"] = config["kv_cache_dtype"]
        if "gpu_memory_fraction" in config:
            kv["free_gpu_memory_fraction"] = float(config["gpu_memory_fraction"])
        if kv:
            out["kv_cache_config"] = kv
        if config.get("speculative_method") == "eagle3":
            # 1.2.1 has no Eagle3 type: EAGLE-3 is Eagle with the one-model EAGLE-3 path.
            out["speculative_config"] = {
                "decoding_type": "Eagle",
                "max_draft_len": int(config.get("num_speculative_tokens", DEFAULT_DRAFT_LEN)),
                "speculative_model": settings.draft_model,
                "eagle3_one_model": True,
            }
        return deep_merge(settings.args, out)

    def launch_plan(self, config: dict[str, Any], settings: EngineSettings, *, host: str,
                    port: int, inventory: Inventory, devices: list[int],
                    workdir: str | None = None) -> LaunchPlan:
        import yaml

        files = {CONFIG_FILE: yaml.safe_dump(self.engine_config(config, settings),
                                             sort_keys=False)}
        world = self.world_size(config)
        argv = [settings.executable if not settings.container else "trtllm-serve",
                settings.model, "--host", host, "--port", str(port), "--backend", "pytorch",
                "--config", CONFIG_FILE]
        env = dict(settings.env)
        extra: dict[str, Any] = {}
        if settings.container:
            extra["engine_argv"] = argv  # what runs inside the image (Kubernetes)
            argv = self._in_container(argv, settings, port, devices[:world], workdir, env)
        elif inventory.kind == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices[:world]))
        return LaunchPlan(engine=self.name, argv=argv, env=env, files=files, host=host,
                          port=port, model=settings.model, gpus=world, version_path=None,
                          extra=extra)

    def _in_container(self, argv: list[str], settings: EngineSettings, port: int,
                      devices: list[int], workdir: str | None, env: dict[str, str]) -> list[str]:
        argv = [a if a != CONFIG_FILE else f"{CONTAINER_DIR}/{CONFIG_FILE}" for a in argv]
        wrapped = container_argv(settings.container, argv, port=port, model=settings.model,
                                 devices=devices, name=f"tuner-trtllm-{port}", env=env)
        if not workdir:
            raise ValueError("a container launch needs the absolute directory of its files")
        mount = ["-v", f"{workdir}:{CONTAINER_DIR}"]
        image_at = wrapped.index(settings.container["image"])
        return wrapped[:image_at] + mount + wrapped[image_at:]

    def launch_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        argv = list(plan.argv)
        i = argv.index("--config") + 1
        if not argv[i].startswith(CONTAINER_DIR):
            argv[i] = f"{config_dir.rstrip('/')}/{CONFIG_FILE}"
        return argv

    def engine_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        argv = list(plan.extra.get("engine_argv") or plan.argv)
        argv[argv.index("--config") + 1] = f"{config_dir.rstrip('/')}/{CONFIG_FILE}"
        return argv
