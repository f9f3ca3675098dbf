"""Reading an engine's own Prometheus counters around each measured level.

Speculative decoding's acceptance is the engine's to report (the client sees tokens per chunk,
not which were drafted): vLLM exports drafts, draft tokens and accepted draft tokens as counters.
A level's figures are the difference of two snapshots, summed over label sets (engine ranks).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tuner.launcher import http_get

# Counter names per engine (vLLM 0.32, labelled engine="N"); engines not listed expose none that
# tuner reads.
SPEC_DECODE_COUNTERS = {
    "vllm": {
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    },
}


@dataclass(frozen=True)
class SpecDecodeCounts:
    drafts: int
    draft_tokens: int
    accepted_tokens: int

    def __sub__(self, earlier: SpecDecodeCounts) -> SpecDecodeCounts:
        return SpecDecodeCounts(self.drafts - earlier.drafts,
                                self.draft_tokens - earlier.draft_tokens,
                                self.accepted_tokens - earlier.accepted_tokens)


def parse_counters(text: str, names: dict[str, str]) -> SpecDecodeCounts | None:
    """Sum each named counter over its label sets; None when the engine exports none of them."""
    wanted = {v: k for k, v in names.items()}
    totals = dict.fromkeys(names, 0.0)
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[wanted[sample.name]] += sample.value
                seen = True
    if not seen:
        return None
    return SpecDecodeCounts(int(totals["drafts"]), int(totals["draft_tokens"]),
                            int(totals["accepted_tokens"]))


def read_spec_decode(engine: str, base_url: str) -> SpecDecodeCounts | None:
    names = SPEC_DECODE_COUNTERS.get(engine)
    if names is None:
        return None
    got = http_get(base_url + "/metrics", timeout=5.0)
    if got is None or got[0] != 200:
        return None
    return parse_counters(got[1].decode(errors="replace"), names)
