"""The interface the study loop needs from an engine. The loop imports nothing else of engines.

An adapter turns a trial configuration (canonical parameters, see tuner.spec.space) plus the study's
fixed settings into a LaunchPlan: the exact argv, environment and files of one server. The same
plan, placed on default devices, is what gets exported, so a deploy runs what was measured.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import yaml

from tuner.serve.hardware import Inventory
from tuner.spec.gpu_types import DATA, GpuType
from tuner.spec.model_shape import ModelShape


@dataclass
class LaunchPlan:
    engine: str
    argv: list[str]  # argv[0] is the engine executable as given in the spec
    env: dict[str, str]  # only what tuner sets, on top of the inherited environment
    files: dict[str, str]  # file name -> content, written into the server's working directory
    host: str
    port: int
    model: str  # the name requests must use
    gpus: int  # devices this server occupies (the per-GPU divisor)
    health_path: str = "/health"
    version_path: str | None = "/version"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EngineSettings:
    """The study's fixed engine settings (from the spec), apart from the searched parameters."""

    executable: str
    model: str
    args: dict[str, Any]
    env: dict[str, str]
    draft_model: str | None = None
    container: dict[str, Any] | None = None  # ContainerSpec as a dict: runtime, image, args
    # The workload shares prefixes (conversations, a system prompt): each adapter turns its
    # engine's prefix cache on, whatever engine.args say.
    prefix_caching: bool = False


class EngineAdapter(Protocol):
    name: str
    default_executable: str
    # Canonical parameters this engine can express; a space naming others is refused.
    supported_parameters: frozenset[str]
    # Environment of a launch plan that ties a server to the trial's slot (its cores), which an
    # export leaves out: a deploy machine binds its own (or the user sets it).
    slot_env: frozenset[str]

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
        """Called once per trial before launch, and again at export time with devices 0..n-1.
        `workdir` is the absolute directory the plan's files will be in (container mounts)."""
        ...

    def launch_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        """The argv a user runs by hand with the plan's files stored in config_dir."""
        ...

    def engine_command(self, plan: LaunchPlan, config_dir: str) -> list[str]:
        """The engine's own argv inside its image (a Kubernetes container), files in
        config_dir: no container runtime around it."""
        ...

    def world_size(self, config: dict[str, Any]) -> int:
        """Devices one server with this configuration occupies (the per-GPU divisor)."""
        ...

    def expert_parallel_width(self, config: dict[str, Any]) -> int:
        """Ranks the MoE experts are spread over (1 = no expert parallelism)."""
        ...

    def max_in_flight(self, config: dict[str, Any], settings: EngineSettings) -> int | None:
        """The most requests one server with this configuration runs at once (its max batch
        size times the ranks that each hold such a batch), the bound of a load search; None
        when neither the configuration nor the fixed settings give a max batch size."""
        ...

    def infeasibility(self, config: dict[str, Any], shape: ModelShape, gpu: GpuType,
                      settings: EngineSettings) -> str | None:
        """Engine-specific reasons a configuration cannot run (checked before any launch)."""
        ...

    def compute_apart(self, config: dict[str, Any], settings: EngineSettings) -> bool:
        """Whether the server computes in processes of its own, apart from its frontend (so a
        CPU trial can hold the frontend to other cores, tuner.serve.cpu_layout)."""
        ...

    def command_rejection(self, plan: LaunchPlan, say: Callable[[str], None]) -> str | None:
        """Why the engine's own parser rejects this plan's command, before any server starts;
        None where it accepts it or no parser of the engine can run here."""
        ...


def moe_backends(engine: str) -> dict[str, list[str]]:
    """Backend -> architectures where it runs (tuner/data/moe_backends.yaml)."""
    return {backend: list(archs) for backend, archs in _moe_backend_table().get(engine, {}).items()}


def moe_activations(engine: str, backend: str, arch: str) -> list[str] | None:
    """Activation precisions `backend` takes on `arch` where the table names them (vLLM)."""
    archs = _moe_backend_table().get(engine, {}).get(backend)
    return list(archs.get(arch, [])) if isinstance(archs, dict) else None


@functools.cache
def _moe_backend_table() -> dict[str, dict[str, Any]]:
    # Read once: feasibility asks this for every configuration of a space (tens of thousands).
    return yaml.safe_load((DATA / "moe_backends.yaml").read_text())


def backend_infeasibility(engine: str, backend: str | None, arch: str,
                          activation: str | None = None) -> str | None:
    if backend is None:
        return None
    archs = moe_backends(engine).get(backend)
    if archs is None:
        return f"{engine} has no MoE backend {backend!r}"
    if arch not in archs:
        return f"MoE backend {backend} of {engine} runs on {', '.join(archs)}, not {arch}"
    takes = moe_activations(engine, backend, arch)
    if takes is not None and (activation or "bf16") not in takes:
        return (f"MoE backend {backend} of {engine} takes {' or '.join(takes)} activations on "
                f"{arch}, not {activation or 'bf16'}")
    return None


def gpu_server_infeasibility(engine: str, label: str, config: dict[str, Any], gpu: GpuType,
                             settings: EngineSettings, tp: int, ep: int) -> str | None:
    """Rules shared by engines whose server spans `tp` GPUs with experts over `ep` of them and
    that run on NVIDIA GPUs only (TensorRT-LLM, SGLang); checked after their own rules."""
    if tp % ep:
        return f"EP {ep} must divide the {tp} GPUs of the server (TP {tp})"
    method = config.get("speculative_method", "none")
    if method not in ("none", "eagle3"):
        return f"speculative_method {method} is not mapped for {label} (use eagle3)"
    if method == "eagle3" and not settings.draft_model:
        return "EAGLE-3 needs a draft model: set engine.draft_model in the spec"
    if gpu.arch == "cpu":
        return f"{label} needs NVIDIA GPUs: it does not run on this CPU node"
    return backend_infeasibility(engine, config.get("moe_backend"), gpu.arch)


def container_argv(container: dict[str, Any], argv: list[str], *, port: int, model: str,
                   devices: list[int], name: str, env: dict[str, str] | None = None) -> list[str]:
    """`docker run` around an engine argv: GPUs, the port, the model directory, a name to stop,
    and the spec's environment passed into the container (the client's own is not)."""
    run = [container.get("runtime", "docker"), "run", "--rm", "--init", "--name", name,
           "--ipc=host", "-p", f"{port}:{port}"]
    for key in env or {}:
        run += ["-e", key]  # docker takes the value from the client's environment: the plan's
    if devices:
        run += ["--gpus", f'"device={",".join(map(str, devices))}"']
    if model.startswith("/"):
        run += ["-v", f"{model}:{model}:ro"]
    return [*run, *container.get("args", []), container["image"], *argv]
