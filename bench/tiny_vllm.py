"""The tiny model on vLLM's CPU build, as the benches serve it: shared by the benches that start
a server themselves."""

from __future__ import annotations

from pathlib import Path

from tuner.search.context import resolve_executable
from tuner.serve.engines import EngineSettings
from tuner.spec.space import read_model_shape


def tiny_vllm(model_dir: str) -> tuple[str, int, EngineSettings]:
    """The model's resolved path (generated first where it is missing), its vocabulary size,
    and the engine settings of a trial of it."""
    model = Path(model_dir)
    if not model.exists():
        from tuner.serve.tiny_model import generate_tiny_gpt_oss

        generate_tiny_gpt_oss(model)
    path = str(model.resolve())
    settings = EngineSettings(
        executable=resolve_executable("vllm"), model=path,
        args={"max-model-len": 512, "dtype": "bfloat16", "enforce-eager": True,
              "enable-prefix-caching": False},
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"})
    return path, read_model_shape(Path(path)).vocab_size, settings
