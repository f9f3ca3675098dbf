"""vLLM: `vllm serve MODEL --config config.yaml`, one code path for the CUDA and the CPU builds.

The trial's searched parameters and the study's fixed engine args go into one YAML config file
(keys are vLLM's long flag names; nested mappings become JSON, as vLLM's own loader does), and
only host and port stay on the command line. That file is what gets exported: a deploy runs the
very configuration that was measured.
"""

from __future__ import annotations

from typing import Any

from tuner.engines.base import EngineSettings, LaunchPlan
from tuner.hardware import Inventory, split_devices
from tuner.space import world_size

CONFIG_FILE = "config.yaml"

# Canonical parameter -> vLLM flag (without dashes). Speculation is assembled separately.
FLAGS = {
    "tensor_parallel_size": "tensor-parallel-size",
    "data_parallel_size": "data-parallel-size",
    "enable_expert_parallel": "enable-expert-parallel",
    "max_num_seqs": "max-num-seqs",
    "max_num_batched_tokens": "max-num-batched-tokens",
}
SPECULATIVE = ("speculative_method", "num_speculative_tokens", "prompt_lookup_max")


class VllmAdapter:
    name = "vllm"
    supported_parameters = frozenset(FLAGS) | frozenset(SPECULATIVE)

    def engine_config(self, config: dict[str, Any], settings: EngineSettings) -> dict[str, Any]:
        """The YAML for `vllm serve --config`: fixed args first, then the trial's parameters."""
        out: dict[str, Any] = dict(settings.args)
        for canonical, flag in FLAGS.items():
            if canonical in config:
                out[flag] = config[canonical]
        spec = speculative_config(config)
        if spec is not None:
            out["speculative-config"] = spec
        return out

    def placement_env(self, config: dict[str, Any], inventory: Inventory, devices: list[int]):
        world = world_size(config)
        if inventory.kind == "gpu":
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices[:world]))}
        if world > 1:
            # vLLM's CPU build binds each rank's OpenMP threads to the cores listed per rank;
            # without it, TP > 1 fails with "Not enough allowed NUMA nodes".
            groups = split_devices(devices, world)
            return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(_core_range(g) for g in groups)}
        return {}

    def launch_plan(
        self,
        config: dict[str, Any],
        settings: EngineSettings,
        *,
        host: str,
        port: int,
        inventory: Inventory,
        devices: list[int],
    ) -> LaunchPlan:
        import yaml

        files = {CONFIG_FILE: yaml.safe_dump(self.engine_config(config, settings), sort_keys=False)}
        argv = [settings.executable, "serve", settings.model, "--config", CONFIG_FILE,
                "--host", host, "--port", str(port)]
        env = {**settings.env, **self.placement_env(config, inventory, devices)}
        return LaunchPlan(
            engine=self.name, argv=argv, env=env, files=files, host=host, port=port,
            model=settings.model, gpus=world_size(config),
        )

    def launch_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        argv = list(plan.argv)
        argv[argv.index("--config") + 1] = f"{config_dir.rstrip('/')}/{CONFIG_FILE}"
        return argv


def speculative_config(config: dict[str, Any]) -> dict[str, Any] | None:
    method = config.get("speculative_method", "none")
    if method in (None, "none"):
        return None
    out: dict[str, Any] = {"method": method}
    if "num_speculative_tokens" in config:
        out["num_speculative_tokens"] = int(config["num_speculative_tokens"])
    if "prompt_lookup_max" in config:
        out["prompt_lookup_max"] = int(config["prompt_lookup_max"])
    return out


def _core_range(cores: list[int]) -> str:
    if cores == list(range(cores[0], cores[-1] + 1)) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))

