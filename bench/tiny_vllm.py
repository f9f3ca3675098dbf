"""The tiny model on vLLM's CPU build, as the benches serve it: shared by the benches that start
a server themselves. `fake_engine` swaps vLLM for the repository's fake engine
(tuner.testing.fake_engine) in those settings: what the benches' `--smoke` runs serve."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from tuner.search.context import resolve_executable
from tuner.serve.engines import EngineSettings
from tuner.spec.model_shape import read_model_shape
from tuner.testing.fake_engine import LANDSCAPE_ENV, fake_vllm

# The fake engine's timetable in a smoke run: quick, and slow enough to measure.
SMOKE_LANDSCAPE = {"default": {"ttft_s": 0.005, "itl_s": 0.001}}
SMOKE_HEADER = ("smoke: served by the fake engine (tuner.testing.fake_engine), not vLLM: its "
                "figures are the fake's timetable, not a measurement of vLLM")


def tiny_vllm(model_dir: str) -> tuple[str, int, EngineSettings]:
    """The model's resolved path (generated first where it is missing), its vocabulary size,
    and the engine settings of a trial of it."""
    model = tiny_model(model_dir)
    path = str(model.resolve())
    settings = EngineSettings(
        executable=resolve_executable("vllm"), model=path,
        args={"max-model-len": 512, "dtype": "bfloat16", "enforce-eager": True,
              "enable-prefix-caching": False},
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"})
    return path, read_model_shape(Path(path)).vocab_size, settings


def tiny_model(model_dir: str) -> Path:
    """The tiny gpt-oss at `model_dir`, generated where it is missing: under a file lock and
    whole or not at all, so benches started side by side (the test suite's workers) generate it
    once."""
    model = Path(model_dir)
    if model.exists():
        return model
    from filelock import FileLock

    from tuner.serve.tiny_model import generate_tiny_gpt_oss

    model.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(model) + ".lock"):
        if not model.exists():
            partial = model.with_name(model.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            generate_tiny_gpt_oss(partial).rename(model)
    return model


def fake_engine(settings: EngineSettings, folder: Path,
                landscape: dict | None = None) -> EngineSettings:
    """`settings` with the fake engine in vLLM's place: an executable `vllm` in `folder` that
    serves an OpenAI-compatible API on the timetable of `landscape` (default SMOKE_LANDSCAPE),
    started through tuner's own adapter and launcher as vLLM would be."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "landscape.json"
    path.write_text(json.dumps(landscape or SMOKE_LANDSCAPE))
    return dataclasses.replace(settings, executable=str(fake_vllm(folder / "bin")),
                               env={**settings.env, LANDSCAPE_ENV: str(path)})
