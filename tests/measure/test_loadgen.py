"""The load generator: per-request timing (against a scripted clock, then against a scripted server
on 127.0.0.1), fixed concurrency, warm-up, failures as results, the sweep, chat requests, Poisson
arrivals and repeated rounds."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import socket
import statistics
import time

import aiohttp
import pytest

from tuner.measure.client import (
    Prompt,
    fewer_collections,
    measure_reads,
    measure_stream,
    request_body,
)
from tuner.measure.loadgen import LevelRun, Repeats, poisson_gaps, run_level, run_sweep
from tuner.measure.metrics import summarize_level
from tuner.measure.prompts import synthetic_token_prompts
from tuner.spec.sla import SLA
from tuner.testing.fake_openai_server import (
    FakeOpenAIServer,
    Script,
    serve_in_process,
    serve_in_thread,
)

# measure_stream: the timing rules, with a scripted clock and a replayed stream


def choice(text: str) -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": None}], "usage": None}


def usage(prompt: int, completion: int) -> dict:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


async def replay(events):
    for event in events:
        yield event


def measure(events: list[dict], times: list[float], start: float = 10.0):
    """Time a replayed stream; the clock returns `times` in order: one per event, then the end."""
    clock = iter(times).__next__
    return asyncio.run(measure_stream(replay(events), start, clock))


def test_ttft_is_the_first_choice_and_itl_the_gaps_between_choices_empty_text_included():
    events = [choice(" a"), choice(""), choice(" b"), choice(""), usage(7, 4)]
    r = measure(events, [10.5, 10.75, 11.0, 11.5, 11.625, 12.0])
    assert r.ok and r.error is None
    assert r.ttft_s == 0.5
    assert r.itl_s == [0.25, 0.25, 0.5]  # the usage-only event is not a token
    assert r.latency_s == 2.0  # to the end of the stream, not the last token
    assert (r.prompt_tokens, r.output_tokens) == (7, 4)


def test_latency_is_ttft_plus_the_gaps_plus_the_tail_after_the_last_token():
    events = [choice(" a"), choice(" b"), choice(" c"), usage(3, 3)]
    times = [10.3, 10.4, 10.45, 10.46, 10.47]
    r = measure(events, times)
    tail = times[-1] - times[2]
    assert r.latency_s - r.ttft_s == pytest.approx(sum(r.itl_s) + tail, abs=1e-12)


def test_tokens_come_from_usage_not_from_counting_chunks():
    # Speculative decoding streams several tokens per chunk: 2 chunks, 5 tokens.
    r = measure([choice(" a b"), choice(" c d e"), usage(3, 5)], [10.1, 10.2, 10.3, 10.4])
    assert (r.output_tokens, len(r.itl_s)) == (5, 1)


@pytest.mark.parametrize("events, error", [
    ([choice(" a"), choice(" b")], "stream ended without usage"),
    ([usage(3, 0)], "stream ended without a token"),
    ([], "stream ended without a token"),
    ([choice(" a"), {"error": {"message": "engine died"}}], "server error event: engine died"),
])
def test_an_incomplete_or_failed_stream_is_a_failed_result(events, error):
    r = measure(events, [10.0 + 0.1 * i for i in range(1, len(events) + 2)])
    assert not r.ok
    assert r.error == error
    assert r.latency_s is not None and r.latency_s > 0


def measure_batches(batches: list[list[dict]], times: list[float], start: float = 10.0):
    """Time a replayed stream read by read; the clock returns `times` in order: one per read,
    then the end."""
    async def replay_reads():
        for batch in batches:
            yield batch

    return asyncio.run(measure_reads(replay_reads(), start, iter(times).__next__))


def test_events_that_arrive_in_one_read_share_its_time():
    # Read 1: the first two tokens; read 2: one token; read 3: two tokens and the usage.
    batches = [[choice(" a"), choice(" b")], [choice("")], [choice(" c"), choice(" d"),
                                                           usage(7, 5)]]
    r = measure_batches(batches, [10.5, 10.75, 11.0, 11.25])
    assert r.ok and r.ttft_s == 0.5
    assert r.itl_s == [0.0, 0.25, 0.25, 0.0]  # a gap per token after the first, 0 within a read
    assert r.latency_s == 1.25 and (r.prompt_tokens, r.output_tokens) == (7, 5)


def test_an_error_event_fails_the_request_at_the_read_that_brought_it():
    batches = [[choice(" a")], [choice(" b"), {"error": {"message": "engine died"}}]]
    r = measure_batches(batches, [10.1, 10.4, 11.0])
    assert not r.ok and r.error == "server error event: engine died"
    assert r.latency_s == pytest.approx(0.4)


def test_usage_on_every_chunk_keeps_the_last_counts():
    # vLLM's continuous_usage_stats puts usage on each chunk; the final one is the total.
    batches = [[{**choice(" a"), "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
                {**choice(" b"), "usage": {"prompt_tokens": 3, "completion_tokens": 2}}],
               [usage(3, 2)]]
    r = measure_batches(batches, [10.1, 10.2, 10.3])
    assert r.ok and (r.prompt_tokens, r.output_tokens) == (3, 2) and r.itl_s == [0.0]


# against a scripted server on 127.0.0.1

PROMPTS = [[i, i + 1, i + 2] for i in range(0, 300, 3)]  # 100 distinct 3-token prompts


def level(base_url: str, concurrency: int, requests: int, output_len: int = 4,
          timeout_s: float = 10.0, warmup: int = 0, prompts=PROMPTS) -> LevelRun:
    async def go():
        async with aiohttp.ClientSession() as session:
            return await run_level(session, base_url, "fake-model", prompts, concurrency,
                                   requests, output_len, timeout_s, warmup)

    return asyncio.run(go())


def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there now


def test_measured_ttft_and_itl_match_the_server_timetable_within_5_percent():
    # 1 s to the first token, then 50 ms apart; every 4th chunk is empty text. The server runs
    # in its own process so that its timetable holds while the client works. The time base is
    # long enough that a busy machine's wake-ups (tens of ms at worst, seen here at load 9 on
    # 2 cores) stay inside 5%; the gaps are on absolute deadlines, so their mean is not moved.
    with serve_in_process(Script(ttft_s=1.0, itl_s=0.050, empty_every=4)) as (url, _pid):
        run = level(url, concurrency=4, requests=8, output_len=25, timeout_s=30)
    assert [r.ok for r in run.results] == [True] * 8
    assert statistics.median(r.ttft_s for r in run.results) == pytest.approx(1.0, rel=0.05)
    gaps = [g for r in run.results for g in r.itl_s]
    assert statistics.fmean(gaps) == pytest.approx(0.050, rel=0.05)
    for r in run.results:
        assert len(r.itl_s) == 24  # 25 chunks, empty ones too
        assert (r.prompt_tokens, r.output_tokens) == (3, 25)


def test_latency_covers_ttft_and_every_gap_plus_only_a_tiny_tail():
    with serve_in_process(Script(ttft_s=0.050, itl_s=0.100)) as (url, _pid):
        run = level(url, concurrency=4, requests=8, output_len=10)
    tails = [r.latency_s - r.ttft_s - math.fsum(r.itl_s) for r in run.results]
    assert all(t >= -1e-9 for t in tails)
    # Usage and [DONE] follow the last token at once; a missed token would leave 100 ms here,
    # far above what a busy machine's scheduling puts between two reads.
    assert statistics.median(tails) < 0.050


def test_the_request_is_a_streamed_greedy_completion_of_exactly_output_len_tokens():
    server = FakeOpenAIServer()
    with serve_in_thread(server) as url:
        level(url, concurrency=1, requests=1, output_len=7)
    assert server.bodies[:1] == [{
        "model": "fake-model", "prompt": [0, 1, 2], "max_tokens": 7, "ignore_eos": True,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
    }]


def test_closed_loop_workers_hold_the_concurrency_and_never_exceed_it():
    server = FakeOpenAIServer(Script(ttft_s=0.030, itl_s=0.005))
    with serve_in_thread(server) as url:
        run = level(url, concurrency=3, requests=12, output_len=5)
    assert server.max_in_flight == 3
    # A round is the first 12 completions; the workers kept going, and what was still in
    # flight when it ended was cancelled.
    assert len(run.results) == 12 and all(r.ok for r in run.results)
    assert 12 <= len(server.bodies) <= 12 + 3 and run.sent == len(server.bodies)
    assert run.concurrency == 3
    assert len(server.peers) == 3  # connections are reused, not opened per request


def test_each_worker_sends_its_next_request_as_its_previous_one_ends():
    server = FakeOpenAIServer(Script(ttft_s=0.050, itl_s=0.010))
    with serve_in_thread(server) as url:
        run = level(url, concurrency=2, requests=6, output_len=5)
    by_start = sorted(run.results, key=lambda r: r.start)
    ends = sorted(r.end for r in run.results)
    # No drained waves: a send follows a completion at once (two workers, so starts from the
    # third on each follow one of the earlier ends).
    assert all(min(abs(r.start - e) for e in ends) < 0.02 for r in by_start[2:])
    assert run.duration_s == pytest.approx(max(ends) - run.rounds[0].results[0].start, abs=0.02)
    assert run.duration_s >= 3 * 0.090  # three requests per worker of 50 + 4 * 10 ms


def test_the_warm_up_goes_first_and_requests_it_overlaps_are_not_timed():
    server = FakeOpenAIServer(Script(ttft_s=0.010, itl_s=0.002))
    prompts = [[1], [2], [3], [4]]
    with serve_in_thread(server) as url:
        run = level(url, concurrency=2, requests=5, warmup=2, prompts=prompts)
    warm_end = sorted(server.arrivals)[1]  # the warm-up's two requests were sent first
    sent = [b["prompt"] for b in server.bodies]
    assert sorted(sent[:2]) == [[1], [2]]
    assert sent[2:5] == [[3], [4], [1]]  # then the next prompts, cycled
    # The round counts the 5 completions after the warm-up's last, and times only the requests
    # that started after it: those in flight across its end are left out.
    assert 3 <= len(run.results) <= 5
    assert all(r.index >= 2 for r in run.results)
    assert run.rounds[0].output_tok_s > 0 and warm_end > 0


def test_events_split_across_network_writes_are_timed_and_counted():
    server = FakeOpenAIServer(Script(split_events=True))
    with serve_in_thread(server) as url:
        run = level(url, concurrency=2, requests=2, output_len=6)
    assert all(r.ok and r.output_tokens == 6 and len(r.itl_s) == 5 for r in run.results)


@pytest.mark.parametrize("script, error_start", [
    (Script(fail="http500"), "HTTP 500"),
    (Script(fail="close_mid_stream", itl_s=0.005), "ClientPayloadError"),
    (Script(fail="no_usage"), "stream ended without usage"),
    (Script(fail="error_event"), "server error event: engine died"),
    (Script(ttft_s=2.0), "TimeoutError"),
])
def test_server_failures_are_failed_results_and_counted_as_errors(script, error_start):
    server = FakeOpenAIServer(script)
    with serve_in_thread(server) as url:
        # A short timeout only where the timeout is what is tested: a loaded machine can take
        # longer than 0.3 s to answer the other failures.
        timeout_s = 0.3 if error_start == "TimeoutError" else 30
        run = level(url, concurrency=2, requests=3, output_len=6, timeout_s=timeout_s)
    assert len(run.results) == 3
    for r in run.results:
        assert not r.ok
        assert r.error.startswith(error_start), r.error
    m = summarize_level(run, gpus=1, sla=SLA())
    assert (m.requests, m.errors, m.meets_sla) == (3, 3, False)
    assert m.error_sample.startswith(error_start)


def test_a_refused_connection_is_a_failed_result():
    run = level(refused_url(), concurrency=2, requests=3)
    assert [r.ok for r in run.results] == [False] * 3
    assert all(r.error.startswith("ClientConnectorError") for r in run.results)


# run_sweep


def test_a_sweep_runs_the_levels_in_order_and_reports_each_as_it_ends():
    server = FakeOpenAIServer(Script(ttft_s=0.020, itl_s=0.005))
    reported = []
    with serve_in_thread(server) as url:
        runs = run_sweep(url, "fake-model", PROMPTS, [1, 2, 4], requests_per_level=8,
                         output_len=4, warmup_requests=2, request_timeout_s=10,
                         on_level=reported.append)
    assert [r.concurrency for r in runs] == [1, 2, 4]
    assert reported == runs
    assert all(0 < len(r.results) <= 8 for r in runs)
    assert all(r.ok for run in runs for r in run.results)
    assert sum(r.sent for r in runs) == len(server.bodies)
    assert server.max_in_flight == 4
    # Prompts continue across levels: none is sent twice, so none hits the prefix cache.
    sent = [tuple(b["prompt"]) for b in server.bodies]
    assert len(set(sent)) == len(sent)


def test_stop_ends_the_sweep_between_levels_with_the_levels_measured_so_far():
    server = FakeOpenAIServer()
    reported = []
    with serve_in_thread(server) as url:
        runs = run_sweep(url, "fake-model", PROMPTS, [1, 2, 4], requests_per_level=3,
                         output_len=4, warmup_requests=1, request_timeout_s=10,
                         on_level=reported.append, stop=lambda: len(reported) >= 1)
    assert [r.concurrency for r in runs] == [1]
    assert len(server.bodies) in (1 + 3, 1 + 3 + 1)  # the next send may be under way


def test_a_sweep_against_a_dead_server_returns_failed_results_without_raising():
    runs = run_sweep(refused_url(), "fake-model", PROMPTS, [1, 2], requests_per_level=2,
                     output_len=4, warmup_requests=1, request_timeout_s=1)
    assert all(r.results for r in runs)
    assert not any(r.ok for run in runs for r in run.results)


# the synthetic prompts it sends (tuner.measure.prompts)

PINNED_SEED0 = [850, 636, 511, 269, 307]  # numpy PCG64 since 2026-12-03 (was random.Random)


def test_synthetic_prompts_have_exactly_input_len_ids_inside_the_vocabulary():
    prompts = synthetic_token_prompts(5, 64, vocab_size=100, seed=1)
    assert len(prompts) == 5
    assert all(len(p) == 64 and all(0 <= t < 100 for t in p) for p in prompts)
    assert len({tuple(p) for p in prompts}) == 5


def test_synthetic_prompts_never_contain_the_avoided_special_tokens():
    prompts = synthetic_token_prompts(20, 50, vocab_size=10, seed=0, avoid_ids=[0, 9, 4])
    assert {t for p in prompts for t in p} == {1, 2, 3, 5, 6, 7, 8}


def test_synthetic_prompts_are_the_same_for_the_same_seed_and_differ_for_another():
    assert synthetic_token_prompts(3, 16, 1000, seed=7) == synthetic_token_prompts(3, 16, 1000, 7)
    assert synthetic_token_prompts(3, 16, 1000, seed=7) != synthetic_token_prompts(3, 16, 1000, 8)
    # Pinned so a change of generator shows: stored results name their seed.
    assert synthetic_token_prompts(1, 5, 1000, seed=0)[0] == PINNED_SEED0


def test_synthetic_prompts_refuse_a_vocabulary_left_empty():
    with pytest.raises(ValueError):
        synthetic_token_prompts(1, 4, vocab_size=2, seed=0, avoid_ids=[0, 1])


# chat requests (the same timing, through the same SSE parser)


def test_chat_requests_are_streamed_chat_completions_timed_from_the_first_content():
    # The fake server announces the role at once, then the first token 50 ms later.
    server = FakeOpenAIServer(Script(ttft_s=0.050, itl_s=0.050))
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Name three colours"}]
    with serve_in_thread(server) as url:
        runs = run_sweep(url, "fake-model", [Prompt(messages=messages)], [1],
                         requests_per_level=2, output_len=6, warmup_requests=0,
                         request_timeout_s=10, api="chat")
    assert server.bodies[0] == {
        "model": "fake-model", "messages": messages, "max_completion_tokens": 6,
        "ignore_eos": True, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }
    for r in runs[0].results:
        assert r.ok and (r.prompt_tokens, r.output_tokens) == (5, 6)
        # The role announcement is not a token: 6 tokens make 5 gaps (a 7th chunk counted would
        # make 6), and the first token is the first content, 50 ms in, not the role at ~0 ms.
        # No gap's size is asserted: on a busy machine two tokens can arrive in one read.
        assert len(r.itl_s) == 5
        assert r.ttft_s >= 0.050


def test_a_text_prompt_goes_to_chat_as_one_user_turn_and_its_own_output_len_wins():
    server = FakeOpenAIServer()
    with serve_in_thread(server) as url:
        run_sweep(url, "m", [Prompt(text="Hello there", output_len=3)], [1], 1, 9, 0, 10,
                  api="chat")
    assert server.bodies[0]["messages"] == [{"role": "user", "content": "Hello there"}]
    assert server.bodies[0]["max_completion_tokens"] == 3


def test_token_ids_cannot_be_sent_as_chat_and_messages_not_as_completions():
    with pytest.raises(ValueError, match="chat request needs text"):
        request_body("chat", "m", [1, 2, 3], 4)
    with pytest.raises(ValueError, match="use api chat"):
        request_body("completions", "m", Prompt(messages=[{"role": "user", "content": "x"}]), 4)


# Poisson arrivals (open loop)


def test_poisson_gaps_are_exponential_with_mean_one_over_the_rate_and_seeded():
    gaps = list(itertools.islice(poisson_gaps(8.0, random.Random(5)), 20000))
    # Exponential: mean = sd = 1/rate = 125 ms. The mean of 20000 gaps has a relative standard
    # error of 1/sqrt(20000) = 0.7%: 3% is over four of them.
    assert statistics.fmean(gaps) == pytest.approx(0.125, rel=0.03)
    assert statistics.stdev(gaps) == pytest.approx(0.125, rel=0.05)
    assert sum(g > 0.125 for g in gaps) / len(gaps) == pytest.approx(math.exp(-1), abs=0.02)
    again = list(itertools.islice(poisson_gaps(8.0, random.Random(5)), 20000))
    assert again == gaps


def test_open_loop_sends_do_not_wait_for_completions():
    # Each response takes 3 s; at 40 requests/s, 12 requests are due within ~0.3 s, so even a
    # busy machine's late wake-ups send them all before the first one completes: all 12 are in
    # flight at once.
    server = FakeOpenAIServer(Script(ttft_s=3.0, itl_s=0.0))
    with serve_in_thread(server) as url:
        runs = run_sweep(url, "m", PROMPTS, [64], requests_per_level=12, output_len=2,
                         warmup_requests=0, request_timeout_s=10, rates=[40.0], seed=3)
    assert server.max_in_flight == 12
    assert max(server.arrivals) - min(server.arrivals) < 3.0  # within one response time
    (run,) = runs
    assert (run.concurrency, run.request_rate, len(run.results)) == (64, 40.0, 12)
    assert all(r.ok for r in run.results)


def test_open_loop_arrivals_follow_the_seeded_schedule():
    server = FakeOpenAIServer(Script(ttft_s=0.01))
    with serve_in_thread(server) as url:
        (run,) = run_sweep(url, "m", PROMPTS, [64], requests_per_level=10, output_len=2,
                           warmup_requests=0, request_timeout_s=10, rates=[20.0], seed=4)
    # Level 0 of seed 4 draws from Random(4 * 1_000_003 + 0); arrivals sit at the sums of gaps.
    gaps = list(itertools.islice(poisson_gaps(20.0, random.Random(4 * 1_000_003)), 9))
    planned = list(itertools.accumulate(gaps, initial=0.0))
    # Each request is timed from its scheduled arrival (a late send has waited, as a user
    # would), so its start is the schedule itself, however busy the machine; all were sent.
    starts = sorted(r.start for r in run.results)
    assert [t - starts[0] for t in starts] == pytest.approx(planned, abs=1e-9)
    assert len(server.arrivals) == 10


def test_open_loop_in_flight_requests_are_capped_at_the_largest_concurrency():
    server = FakeOpenAIServer(Script(ttft_s=0.5))
    with serve_in_thread(server) as url:
        run_sweep(url, "m", PROMPTS, [2, 3], requests_per_level=8, output_len=2,
                  warmup_requests=0, request_timeout_s=10, rates=[100.0], seed=1)
    assert server.max_in_flight == 3


def test_open_loop_warm_up_is_sent_first_and_left_out_of_the_level():
    server = FakeOpenAIServer(Script(ttft_s=0.2))
    with serve_in_thread(server) as url:
        (run,) = run_sweep(url, "m", PROMPTS, [16], requests_per_level=4, output_len=2,
                           warmup_requests=3, request_timeout_s=10, rates=[50.0])
    assert len(server.bodies) == 7 and len(run.results) == 4
    warm_end = sorted(server.arrivals)[2] + 0.2  # the last warm-up completes
    first_timed = min(r.start for r in run.results)
    # The level starts after the warm-up is over: its duration holds timed requests only.
    assert run.duration_s == pytest.approx(max(r.end for r in run.results) - first_timed)
    assert sorted(server.arrivals)[3] >= warm_end - 0.01


# repeats


def test_steady_rounds_stop_at_three_once_the_interval_is_tight():
    server = FakeOpenAIServer(Script(ttft_s=0.020, itl_s=0.005))
    with serve_in_thread(server) as url:
        (run,) = run_sweep(url, "m", PROMPTS, [2], requests_per_level=6, output_len=4,
                           warmup_requests=1, request_timeout_s=10,
                           # A target any rounds meet, however busy the machine: only the
                           # minimum of rounds can hold the level, never how fast they ran.
                           repeats=Repeats(max_rounds=5, ci_target=1e9))
    assert len(run.rounds) == 3  # two rounds never stop a level: one degree of freedom
    assert 3 * 6 - 3 * 2 <= len(run.results) <= 3 * 6
    assert run.duration_s == pytest.approx(sum(r.duration_s for r in run.rounds))
    sent = [tuple(b["prompt"]) for b in server.bodies]
    assert len(set(sent)) == len(sent)  # every round takes fresh prompts


def test_closed_loop_rounds_are_contiguous_windows_on_the_perf_counter_clock():
    server = FakeOpenAIServer(Script(ttft_s=0.010, itl_s=0.002))
    with serve_in_thread(server) as url:
        before = time.perf_counter()
        (run,) = run_sweep(url, "m", PROMPTS, [2], requests_per_level=4, output_len=3,
                           warmup_requests=2, request_timeout_s=10,
                           repeats=Repeats(max_rounds=3, ci_target=1e-9))
        after = time.perf_counter()
    spans = [rnd.span for rnd in run.rounds]
    assert len(spans) == 3 and before < spans[0][0] and spans[-1][1] < after
    for (_, end), (begin, _) in itertools.pairwise(spans):
        assert begin == end  # each window starts where the last one ended
    for rnd in run.rounds:
        assert rnd.span[1] - rnd.span[0] == pytest.approx(rnd.duration_s)
        # its latency sample started and ended inside it
        assert all(rnd.span[0] <= r.start and r.end <= rnd.span[1] for r in rnd.results)


def test_rounds_stop_at_max_rounds_when_the_target_is_out_of_reach():
    server = FakeOpenAIServer(Script(ttft_range=(0.0, 0.06), itl_s=0.002, seed=2))
    with serve_in_thread(server) as url:
        (run,) = run_sweep(url, "m", PROMPTS, [1], requests_per_level=3, output_len=3,
                           warmup_requests=0, request_timeout_s=10,
                           repeats=Repeats(max_rounds=3, ci_target=1e-6))
    assert len(run.rounds) == 3
    m = summarize_level(run, 1, SLA(), ci_target=1e-6)
    assert (m.rounds, m.converged) == (3, False) and m.output_tok_s_ci95 > 0


def test_stop_is_checked_between_rounds():
    server = FakeOpenAIServer()
    with serve_in_thread(server) as url:
        (run,) = run_sweep(url, "m", PROMPTS, [1], requests_per_level=2, output_len=2,
                           warmup_requests=0, request_timeout_s=10,
                           repeats=Repeats(max_rounds=5, ci_target=1e-9),
                           stop=lambda: len(server.bodies) >= 2)
    assert len(run.rounds) == 1


def test_a_round_where_every_request_failed_ends_the_repeats():
    server = FakeOpenAIServer(Script(fail="http500"))
    with serve_in_thread(server) as url:
        (run,) = run_sweep(url, "m", PROMPTS, [2], requests_per_level=3, output_len=2,
                           warmup_requests=0, request_timeout_s=10,
                           repeats=Repeats(max_rounds=4, ci_target=0.05))
    assert len(run.rounds) == 1 and len(server.bodies) >= 3  # no second round was measured


# length distributions (workload.range_ratio)


def test_spread_lengths_are_uniform_over_the_range_with_the_spec_length_as_mean():
    from tuner.measure.prompts import spread_lengths

    lengths = spread_lengths(20000, 100, 0.5, random.Random(0))
    assert min(lengths) == 50 and max(lengths) == 150
    assert statistics.fmean(lengths) == pytest.approx(100, rel=0.01)
    # Uniform over 101 integers: sd = sqrt((101^2 - 1) / 12) = 29.2
    assert statistics.pstdev(lengths) == pytest.approx(29.2, rel=0.03)
    assert spread_lengths(5, 64, 0.0, random.Random(1)) == [64] * 5


def test_spread_prompts_cut_each_window_and_give_each_its_own_output_length():
    from tuner.measure.prompts import longest, spread_prompts

    windows = synthetic_token_prompts(50, longest(40, 0.25), vocab_size=1000, seed=3)
    prompts = spread_prompts(windows, 40, 20, 0.25, seed=3)
    assert all(30 <= len(p.tokens) <= 50 and 15 <= p.output_len <= 25 for p in prompts)
    assert all(p.tokens == w[:len(p.tokens)] for p, w in zip(prompts, windows, strict=True))
    assert len({len(p.tokens) for p in prompts}) > 5 and len({p.output_len for p in prompts}) > 5
    assert prompts == spread_prompts(windows, 40, 20, 0.25, seed=3)  # seeded


def test_spread_output_lengths_reach_the_request_body():
    server = FakeOpenAIServer()
    with serve_in_thread(server) as url:
        run_sweep(url, "m", [Prompt(tokens=[1, 2], output_len=3),
                             Prompt(tokens=[3], output_len=7)], [1], 2, 5, 0, 10)
    assert [b["max_tokens"] for b in server.bodies[:2]] == [3, 7]
    assert [b["prompt"] for b in server.bodies[:2]] == [[1, 2], [3]]


# the client's own cost


@pytest.mark.parametrize("chunks_per_write", [1, 7, 64])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_chunks_coalesced_into_large_writes_are_each_counted_once(chunks_per_write, api):
    # 7 does not divide 20: the last write carries a partial group with the usage and [DONE].
    server = FakeOpenAIServer(Script(chunks_per_write=chunks_per_write, empty_every=3))
    prompts = [Prompt(text="hello there", tokens=[1, 2]) for _ in range(8)]
    with serve_in_thread(server) as url:
        (run,) = run_sweep(url, "m", prompts, [3], requests_per_level=6, output_len=20,
                           warmup_requests=0, request_timeout_s=30, api=api)
    assert run.results and all(r.ok for r in run.results)
    assert all(len(r.itl_s) == 19 and r.output_tokens == 20 for r in run.results)


def test_each_level_records_the_clients_own_cpu_time_within_its_wall_time():
    server = FakeOpenAIServer(Script(itl_s=0.001))
    with serve_in_thread(server) as url:
        runs = run_sweep(url, "m", PROMPTS, [1, 4], requests_per_level=8, output_len=8,
                         warmup_requests=2, request_timeout_s=30)
    for run in runs:
        # One thread's CPU time cannot run ahead of the wall clock.
        assert 0 < run.client_cpu_s <= run.client_wall_s
        assert run.client_cpu_use == run.client_cpu_s / run.client_wall_s
        assert run.client_wall_s >= run.duration_s


def test_sweeps_collect_garbage_less_often_and_the_last_to_end_restores_the_setting():
    import gc
    import threading

    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    inside, leave = threading.Event(), threading.Event()

    def other_sweep() -> None:
        with fewer_collections():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other_sweep)
    thread.start()
    inside.wait(10)
    with fewer_collections():
        seen.append(gc.get_threshold())
    seen.append(gc.get_threshold())  # the other sweep still runs: still raised
    leave.set()
    thread.join(10)
    assert seen[0][0] > before[0] and seen[1] == seen[0]
    assert gc.get_threshold() == before
