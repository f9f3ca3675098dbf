"""The engine's own metrics: speculative-decoding counters, the scheduler's gauges sampled
during a level, and natural-text prompts."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from tuner.measure.engine_metrics import (
    GAUGES,
    SPEC_DECODE_COUNTERS,
    SpecDecodeCounts,
    gauge_monitor,
    parse_counters,
    parse_gauges,
    sample_gauges,
)
from tuner.measure.prompts import corpus_token_prompts
from tuner.measure.records import EngineGauges
from tuner.store.records import LevelMeasurement

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


# The scheduler's gauges, sampled during a level (vLLM 0.32's names, two engine ranks)

GAUGE_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_running{{engine="1",model_name="m"}} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{{engine="0",model_name="m",reason="capacity"}} 99.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} 0.05
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{{engine="0",model_name="m"}} {preempted}
vllm:num_preemptions_created{{engine="0",model_name="m"}} 1.7e+09
"""


def gauge_text(running=0.0, waiting=0.0, kv=0.0, preempted=0.0) -> str:
    return GAUGE_TEXT.format(running=running, waiting=waiting, kv=kv, preempted=preempted)


def test_one_scrape_sums_requests_over_ranks_and_takes_the_fullest_ranks_kv_cache():
    got = parse_gauges(gauge_text(running=3, waiting=2, kv=0.25, preempted=7), GAUGES["vllm"])
    # Not the by-reason gauge that shares the waiting gauge's name as a prefix.
    assert got == {"running": 4.0, "waiting": 2.0, "kv_cache_usage": 0.25, "preemptions": 7.0}
    assert parse_gauges("# TYPE x gauge\nx 1\n", GAUGES["vllm"]) == {}


def serve_metrics(texts: list[str]):
    """A /metrics endpoint that answers each text in turn, then the last one forever."""
    state = {"n": 0}

    async def metrics(_request):
        text = texts[min(state["n"], len(texts) - 1)]
        state["n"] += 1
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app, state


def sample(app, hold_s: float, interval_s: float = 0.05):
    async def go():
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        done = asyncio.Event()
        try:
            async with aiohttp.ClientSession() as session:
                task = asyncio.create_task(
                    sample_gauges(session, url, GAUGES["vllm"], done, interval_s))
                await asyncio.sleep(hold_s)
                done.set()
                return await task
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def test_a_level_keeps_each_gauges_peak_and_the_preemptions_counted_during_it():
    texts = [gauge_text(running=1, kv=0.1, preempted=5),
             gauge_text(running=9, waiting=4, kv=0.8, preempted=6),
             gauge_text(running=2, kv=0.3, preempted=9)]
    app, state = serve_metrics(texts)
    got = sample(app, hold_s=0.5)
    assert state["n"] >= 4  # sampled all along, not just at the ends
    assert got.samples == state["n"]
    assert (got.kv_cache_usage_max, got.requests_running_max, got.requests_waiting_max,
            got.preemptions) == (0.8, 10.0, 4.0, 4)


def test_an_engine_without_these_metrics_leaves_them_none():
    app, _ = serve_metrics(["# TYPE other gauge\nother 1\n"])
    got = sample(app, hold_s=0.1)
    assert got.samples >= 1
    assert got == EngineGauges(samples=got.samples)
    assert gauge_monitor("some-engine", "http://127.0.0.1:1") is None


def test_corpus_prompts_for_chat_are_the_same_windows_as_text(tiny_model):
    from tokenizers import Tokenizer

    from tuner.measure.prompts import corpus_text_prompts

    tokenizer = tiny_model / "tokenizer.json"
    texts = corpus_text_prompts(4, 32, tokenizer, seed=3)
    windows = corpus_token_prompts(4, 32, tokenizer, seed=3)
    decode = Tokenizer.from_file(str(tokenizer)).decode
    assert [p.text for p in texts] == [decode(w) for w in windows]
    assert all(p.messages is None and p.tokens is None for p in texts)
