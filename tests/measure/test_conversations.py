"""A workload with prefixes to share: multi-turn conversations, each turn resending the history
and a new user message, after a system prompt every conversation shares; a conversation's
turns go one after another, conversations side by side; prefix caching on for them."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from pydantic import ValidationError

from tuner.measure.client import Conversation
from tuner.measure.loadgen import run_level
from tuner.measure.prompts import conversations, synthetic_token_prompts
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.spec.study_spec import WorkloadSpec
from tuner.testing.fake_openai_server import FakeOpenAIServer, serve_in_thread


def draw(count: int, length: int, seed: int) -> list[list[int]]:
    return synthetic_token_prompts(count, length, vocab_size=1000, seed=seed)


def test_each_turn_resends_the_previous_turn_and_its_reply_then_a_new_message():
    convs = conversations(3, turns=3, input_len=5, output_len=4, system_len=7, draw=draw)
    assert len(convs) == 3 and all(len(c.turns) == 3 for c in convs)
    system = convs[0].turns[0][:7]
    for c in convs:
        assert [len(t) for t in c.turns] == [7 + 5, 7 + 5 + 4 + 5, 7 + 2 * (5 + 4) + 5]
        assert all(t[:7] == system for t in c.turns)  # the shared system prompt
        for earlier, later in zip(c.turns, c.turns[1:], strict=False):
            assert later[:len(earlier)] == earlier  # the whole history is resent
    # Conversations differ after the system prompt: only it is shared between them.
    assert convs[0].turns[0][7:] != convs[1].turns[0][7:]


def _level(url: str, prompts, concurrency: int, requests: int):
    async def go():
        async with aiohttp.ClientSession() as session:
            return await run_level(session, url, "fake-model", prompts, concurrency, requests,
                                   output_len=2, request_timeout_s=10)
    return asyncio.run(go())


def test_a_conversations_turns_follow_each_other_and_count_as_requests():
    convs = conversations(4, turns=3, input_len=5, output_len=4, system_len=0, draw=draw)
    server = FakeOpenAIServer()
    with serve_in_thread(server) as url:
        run = _level(url, convs, concurrency=1, requests=6)
    # One worker: two whole conversations, turn after turn, each turn a request of the level.
    assert [b["prompt"] for b in server.bodies[:6]] == [*convs[0].turns, *convs[1].turns]
    assert len(run.results) == 6 and all(r.ok for r in run.results)
    starts_and_ends = [(r.start, r.end) for r in run.results]
    assert all(later[0] >= earlier[1]
               for earlier, later in zip(starts_and_ends, starts_and_ends[1:], strict=False))


def test_conversations_run_side_by_side_one_per_request_in_flight():
    convs = conversations(8, turns=2, input_len=3, output_len=2, system_len=4, draw=draw)
    server = FakeOpenAIServer()
    with serve_in_thread(server) as url:
        run = _level(url, convs, concurrency=2, requests=8)
    assert server.max_in_flight == 2
    sent = [b["prompt"] for b in server.bodies]
    # Each conversation's second turn came after its first.
    for c in convs:
        if c.turns[1] in sent:
            assert sent.index(c.turns[0]) < sent.index(c.turns[1])
    assert run.sent == len({tuple(p[:7]) for p in sent})  # conversations taken


def test_conversations_need_a_closed_loop_and_prompts_of_exact_lengths():
    base = {"input_len": 8, "output_len": 8, "concurrency": [2], "requests_per_level": 4,
            "conversation": {"turns": 3, "system_prompt_len": 16}}
    assert WorkloadSpec(**base).conversation.longest_prompt(8, 8) == 16 + 3 * 8 + 2 * 8
    with pytest.raises(ValidationError, match="closed loop"):
        WorkloadSpec(**{**base, "arrival": "poisson", "request_rates": [1.0]})
    with pytest.raises(ValidationError, match="exact lengths"):
        WorkloadSpec(**{**base, "range_ratio": 0.5})
    with pytest.raises(ValueError, match="closed loop"):
        asyncio.run(_open_loop_with_conversations())


async def _open_loop_with_conversations():
    async with aiohttp.ClientSession() as session:
        await run_level(session, "http://127.0.0.1:9", "m", [Conversation(([1],))], 1, 1, 2, 1,
                        rate=1.0)


def test_a_workload_of_conversations_turns_the_engines_prefix_cache_on():
    # Even where the study's fixed args turn it off (as the demo's do for one-shot prompts).
    settings = EngineSettings(executable="vllm", model="m",
                              args={"enable-prefix-caching": False}, env={},
                              prefix_caching=True)
    assert get_adapter("vllm").engine_config({}, settings)["enable-prefix-caching"] is True
    off = EngineSettings(executable="vllm", model="m", args={"enable-prefix-caching": False},
                         env={})
    assert get_adapter("vllm").engine_config({}, off)["enable-prefix-caching"] is False
