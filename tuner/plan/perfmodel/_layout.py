"""How a server's GPUs split the work, from a study configuration or from a published notation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Layout:
    """How a server's GPUs split the work: attention by TP x DP, experts by EP x (MoE) TP."""

    world: int  # GPUs of one server
    attention_tp: int
    attention_dp: int
    expert_parallel: int

    @property
    def moe_tp(self) -> int:
        return self.world // self.expert_parallel


def layout_of(config: dict[str, Any], adapter: Any) -> Layout:
    """From canonical parameters and the adapter's world size and EP width (no engine names):
    `data_parallel_size` ranks replicate attention; `enable_attention_dp` makes every rank one."""
    world = int(adapter.world_size(config))
    dp = world if config.get("enable_attention_dp") else int(config.get("data_parallel_size", 1))
    dp = max(1, min(dp, world))
    return Layout(world, world // dp, dp, max(1, int(adapter.expert_parallel_width(config))))


# DEP n: attention data-parallel over n ranks with the experts spread over the same n (the
# TensorRT-LLM and InferenceX notation); TEP n: tensor-parallel attention with EP over the same n.
_TOKEN = re.compile(r"(DEP|TEP|TP|DP|EP|PP)(\d+)")


def parse_parallelism(text: str) -> Layout:
    """A published parallelism: "TP8", "TP8 EP1", "DEP2", "TEP8", "TP4EP4", "DP4EP4",
    "TP4 DP2" (separators optional). ValueError for what it cannot read or model."""
    compact = re.sub(r"[\s,+/-]", "", text.upper())
    sizes = {"TP": 1, "DP": 1, "EP": 1}
    pos = 0
    for m in _TOKEN.finditer(compact):
        if m.start() != pos:
            break
        key, n = m.group(1), int(m.group(2))
        if key == "PP":
            raise ValueError(f"parallelism {text!r}: cannot read {m.group(0)!r} (pipeline "
                             "parallelism is not modelled)")
        if n < 1:
            raise ValueError(f"parallelism {text!r}: {m.group(0)!r} is not a degree")
        if key == "DEP":
            sizes.update(DP=n, EP=n)
        elif key == "TEP":
            sizes.update(TP=n, EP=n)
        else:
            sizes[key] = n
        pos = m.end()
    if pos != len(compact) or not compact:
        raise ValueError(f"parallelism {text!r}: cannot read {compact[pos:] or text!r}")
    world = sizes["TP"] * sizes["DP"]
    if world % sizes["EP"]:
        raise ValueError(f"parallelism {text!r}: EP {sizes['EP']} does not divide {world} GPUs")
    return Layout(world, sizes["TP"], sizes["DP"], sizes["EP"])
