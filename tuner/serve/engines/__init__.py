"""Engine adapters, looked up by the name a spec gives."""

from __future__ import annotations

from tuner.serve.engines.base import EngineAdapter, EngineSettings, LaunchPlan
from tuner.serve.engines.sglang import SglangAdapter
from tuner.serve.engines.trtllm import TrtllmAdapter
from tuner.serve.engines.vllm import VllmAdapter
from tuner.spec.errors import BadInput

_ADAPTERS: dict[str, EngineAdapter] = {
    "vllm": VllmAdapter(), "trtllm": TrtllmAdapter(), "sglang": SglangAdapter()}

__all__ = ["EngineAdapter", "EngineSettings", "LaunchPlan", "get_adapter"]


def get_adapter(name: str) -> EngineAdapter:
    try:
        return _ADAPTERS[name]
    except KeyError:
        known = ", ".join(sorted(_ADAPTERS))
        raise BadInput(f"engine.name {name!r} is not a known engine: use one of {known}") from None
