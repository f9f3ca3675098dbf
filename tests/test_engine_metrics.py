"""Speculative-decoding counters read from the engine, and natural-text prompts."""

from __future__ import annotations

import pytest

from tuner.engine_metrics import SPEC_DECODE_COUNTERS, SpecDecodeCounts, parse_counters
from tuner.prompts import corpus_token_prompts
from tuner.records import LevelMeasurement

# As vLLM 0.32's /metrics prints them (one engine; a second label set must be summed).
METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 449.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 51.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 1269.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 451.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 9000.0
"""


def test_counters_are_summed_over_engine_ranks():
    got = parse_counters(METRICS, SPEC_DECODE_COUNTERS["vllm"])
    assert got == SpecDecodeCounts(drafts=500, draft_tokens=1269, accepted_tokens=451)
    assert got - SpecDecodeCounts(100, 269, 51) == SpecDecodeCounts(400, 1000, 400)


def test_an_engine_without_speculation_counters_reports_none():
    assert parse_counters("# TYPE x counter\nx_total 3\n", SPEC_DECODE_COUNTERS["vllm"]) is None


def test_acceptance_rate_and_length_as_vllm_defines_them():
    base = dict(concurrency=1, requests=1, errors=0, duration_s=1.0, input_tokens=1,
                output_tokens=1, request_throughput=1.0, output_tok_s=1.0,
                output_tok_s_per_gpu=1.0, ttft_p50_ms=None, ttft_p90_ms=None, ttft_p99_ms=None,
                itl_p50_ms=None, itl_p90_ms=None, itl_p99_ms=None, tpot_p50_ms=None,
                tpot_p90_ms=None, e2e_p50_ms=None, e2e_p90_ms=None, tok_s_per_user_p50=None,
                tok_s_per_user_p90=None, goodput_rps=1.0, meets_sla=True)
    m = LevelMeasurement(**base, spec_drafts=449, spec_draft_tokens=1269,
                         spec_accepted_tokens=451)
    assert m.acceptance_rate == pytest.approx(451 / 1269)
    assert m.acceptance_length == pytest.approx(1 + 451 / 449)
    assert LevelMeasurement(**base).acceptance_rate is None


def test_corpus_prompts_are_exact_length_windows_of_the_text(tiny_model):
    a = corpus_token_prompts(8, 48, tiny_model / "tokenizer.json", seed=1)
    assert len(a) == 8 and all(len(p) == 48 for p in a)
    assert a == corpus_token_prompts(8, 48, tiny_model / "tokenizer.json", seed=1)
    assert a != corpus_token_prompts(8, 48, tiny_model / "tokenizer.json", seed=2)
    from tokenizers import Tokenizer

    text = Tokenizer.from_file(str(tiny_model / "tokenizer.json")).decode(a[0])
    assert sum(w.isalpha() for w in text.split()) > 5  # words, not random byte soup
