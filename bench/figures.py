"""One client's figures from one run of the cross-check (bench/loadgen_vs_vllm_bench.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figures:
    output_tok_s: float
    ttft_p50_ms: float
    itl_p50_ms: float | None  # each gap between token chunks, pooled over requests
    tpot_p50_ms: float | None  # each request's mean gap after its first token
    input_tokens: float  # per request, as the server's usage counted them
    requests: int  # in the latency sample
