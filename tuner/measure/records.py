"""What the load generator sees: one streamed request, and the engine's own gauges over a level.

Times are seconds from `time.perf_counter()` unless a name says `_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestResult:
    """One streamed request. A failed request is a result (ok=False, error set), not a raise."""

    ok: bool
    start: float  # perf_counter when the request was sent
    ttft_s: float | None = None  # first chunk carrying a choice
    itl_s: list[float] = field(default_factory=list)  # gaps between successive choice chunks
    latency_s: float | None = None  # end to end, send to last byte
    prompt_tokens: int | None = None  # from the server's usage
    output_tokens: int | None = None  # from the server's usage
    error: str | None = None
    index: int | None = None  # closed loop: its place in the level's sends, warm-up included

    @property
    def end(self) -> float | None:
        return None if self.latency_s is None else self.start + self.latency_s


@dataclass(frozen=True)
class EngineGauges:
    """What the engine's own /metrics showed during one level: gauge maxima over the samples
    and the preemption counter's increase; None where the engine exports no such metric."""

    kv_cache_usage_max: float | None = None  # fraction of the KV cache in use, 0..1
    requests_running_max: float | None = None
    requests_waiting_max: float | None = None
    preemptions: int | None = None
    samples: int = 0  # scrapes that answered
