"""Metrics over hand-built requests with known numbers: percentiles, throughput per GPU,
per-user speed, goodput, the SLA at its edges, and which level the objective picks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.measure.loadgen import LevelRun
from tuner.measure.metrics import MISSING_VIOLATION, percentile, sla_violations, summarize_level
from tuner.measure.records import RequestResult
from tuner.spec.sla import SLA


def ok(ttft: float, latency: float, out: int, prompt: int = 10, itl=()) -> RequestResult:
    return RequestResult(ok=True, start=0.0, ttft_s=ttft, itl_s=list(itl), latency_s=latency,
                         prompt_tokens=prompt, output_tokens=out)


def failed(error: str) -> RequestResult:
    return RequestResult(ok=False, start=0.0, latency_s=0.01, error=error)


# Four requests of 101 output tokens over 2 s. Decode speeds (100 tokens after the first):
# 100/1.0 = 100, 100/2.0 = 50, 100/0.5 = 200, 100/1.0 = 100 tok/s.
FOUR = [
    ok(0.1, 1.1, 101, prompt=10, itl=[0.010, 0.020]),
    ok(0.2, 2.2, 101, prompt=20, itl=[0.030]),
    ok(0.3, 0.8, 101, prompt=30, itl=[0.040]),
    ok(0.4, 1.4, 101, prompt=40),
]


def summarize(results, duration=2.0, gpus=2, sla=None, concurrency=4):
    run = LevelRun(concurrency=concurrency, results=results, duration_s=duration)
    return summarize_level(run, gpus, sla or SLA())


# percentile


def test_percentile_interpolates_linearly_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46)
    assert percentile([40, 10, 30, 20, 50], 90) == pytest.approx(46)  # order does not matter


def test_percentile_ends_are_min_and_max_and_one_value_is_every_percentile():
    assert percentile([3, 1, 2], 0) == 1
    assert percentile([3, 1, 2], 100) == 3
    assert percentile([7.5], 10) == 7.5
    assert percentile([7.5], 99) == 7.5


def test_percentile_agrees_with_numpy_default():
    values = list(np.random.default_rng(0).exponential(size=37))
    for q in (0, 1, 10, 25, 50, 90, 99, 99.9, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_is_none_and_q_outside_0_100_is_an_error():
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1, 2], 101)
    with pytest.raises(ValueError):
        percentile([1, 2], -1)


# summarize_level


def test_throughput_counts_output_tokens_over_the_level_duration_and_divides_by_gpus():
    m = summarize(FOUR, duration=2.0, gpus=2)
    assert (m.concurrency, m.requests, m.errors) == (4, 4, 0)
    assert m.duration_s == 2.0
    assert m.input_tokens == 100
    assert m.output_tokens == 404
    assert m.request_throughput == pytest.approx(2.0)
    assert m.output_tok_s == pytest.approx(202.0)
    assert m.output_tok_s_per_gpu == pytest.approx(101.0)


def test_latency_percentiles_are_in_milliseconds():
    m = summarize(FOUR)
    assert m.ttft_p50_ms == pytest.approx(250)
    assert m.ttft_p90_ms == pytest.approx(370)
    assert m.ttft_p99_ms == pytest.approx(397)
    assert m.e2e_p50_ms == pytest.approx(1250)
    assert m.e2e_p90_ms == pytest.approx(1960)


def test_itl_percentiles_pool_the_gaps_of_all_requests():
    m = summarize(FOUR)  # gaps 10, 20, 30, 40 ms
    assert m.itl_p50_ms == pytest.approx(25)
    assert m.itl_p90_ms == pytest.approx(37)
    assert m.itl_p99_ms == pytest.approx(39.7)


def test_per_user_speed_is_output_after_the_first_token_over_decode_time():
    m = summarize(FOUR)  # speeds 50, 100, 100, 200 tok/s; TPOT 20, 10, 10, 5 ms
    assert m.tok_s_per_user_p50 == pytest.approx(100)
    # p90 per user is the speed 90% of requests reach: the 10th percentile, 50 + 0.3 * 50.
    assert m.tok_s_per_user_p90 == pytest.approx(65)
    assert m.tpot_p50_ms == pytest.approx(10)
    assert m.tpot_p90_ms == pytest.approx(17)


def test_a_single_token_request_has_no_decode_speed():
    m = summarize([ok(0.1, 0.1, 1), ok(0.1, 1.1, 101)])
    assert m.tok_s_per_user_p50 == pytest.approx(100)
    assert m.tok_s_per_user_p90 == pytest.approx(100)
    assert m.output_tokens == 102


def test_failed_requests_are_counted_not_measured_and_the_first_error_is_kept():
    m = summarize([*FOUR, failed("HTTP 500: boom"), failed("TimeoutError")])
    assert (m.requests, m.errors) == (6, 2)
    assert m.output_tokens == 404
    assert m.request_throughput == pytest.approx(2.0)
    assert m.ttft_p50_ms == pytest.approx(250)
    assert m.error_sample == "HTTP 500: boom"


def test_a_level_without_a_successful_request_has_no_percentiles_and_zero_throughput():
    m = summarize([failed("ClientConnectorError: refused")])
    assert (m.requests, m.errors, m.output_tok_s, m.goodput_rps) == (1, 1, 0.0, 0.0)
    assert m.ttft_p90_ms is None and m.tok_s_per_user_p90 is None and m.itl_p50_ms is None
    assert not m.meets_sla


def test_zero_duration_gives_zero_rates_not_a_division_error():
    m = summarize([], duration=0.0)
    assert (m.requests, m.output_tok_s, m.request_throughput, m.goodput_rps) == (0, 0.0, 0.0, 0.0)
    assert not m.meets_sla


# goodput and the SLA


def test_without_targets_goodput_is_every_successful_request():
    m = summarize([*FOUR, failed("x")])
    assert m.goodput_rps == pytest.approx(2.0)


def test_goodput_counts_requests_meeting_every_target_each_at_its_edge():
    # TTFTs 100, 200, 300, 400 ms; speeds 100, 50, 200, 100 tok/s.
    assert summarize(FOUR, sla=SLA(ttft_p90_ms=200)).goodput_rps == pytest.approx(1.0)
    assert summarize(FOUR, sla=SLA(min_tok_s_per_user_p90=100)).goodput_rps == pytest.approx(1.5)
    both = SLA(ttft_p90_ms=200, min_tok_s_per_user_p90=100)
    assert summarize(FOUR, sla=both).goodput_rps == pytest.approx(0.5)  # only the first


def test_a_request_without_decode_speed_does_not_meet_a_speed_target():
    m = summarize([ok(0.1, 0.1, 1)], sla=SLA(min_tok_s_per_user_p90=1))
    assert m.goodput_rps == 0.0
    assert not m.meets_sla


def test_meets_sla_when_p90_ttft_equals_the_target_and_not_a_hair_below():
    p90 = summarize(FOUR).ttft_p90_ms
    assert summarize(FOUR, sla=SLA(ttft_p90_ms=p90)).meets_sla
    assert not summarize(FOUR, sla=SLA(ttft_p90_ms=math.nextafter(p90, 0))).meets_sla


def test_meets_sla_when_p90_speed_equals_the_target_and_not_a_hair_above():
    p90 = summarize(FOUR).tok_s_per_user_p90
    assert summarize(FOUR, sla=SLA(min_tok_s_per_user_p90=p90)).meets_sla
    assert not summarize(FOUR, sla=SLA(min_tok_s_per_user_p90=math.nextafter(p90, 1e9))).meets_sla


def test_a_single_error_breaks_the_sla_even_when_the_figures_meet_it():
    loose = SLA(ttft_p90_ms=10_000, min_tok_s_per_user_p90=1)
    assert summarize(FOUR, sla=loose).meets_sla
    assert not summarize([*FOUR, failed("x")], sla=loose).meets_sla
    assert summarize([*FOUR, failed("x")], sla=loose).goodput_rps == pytest.approx(2.0)


# sla_violations


def test_violations_are_each_miss_relative_to_its_target_squashed_into_one():
    sla = SLA(ttft_p90_ms=300, min_tok_s_per_user_p90=80)
    m = summarize([*FOUR, failed("x")], sla=sla)  # p90 TTFT 370 ms, p90 speed 65 tok/s
    # 1 of 5 failed: 0.2; TTFT 70/300 over; speed 15/80 under; each x -> x / (1 + x).
    assert sla_violations(m, sla) == pytest.approx(
        {"errors": 0.2 / 1.2, "ttft_p90_ms": (70 / 300) / (1 + 70 / 300),
         "tok_s_per_user_p90": (15 / 80) / (1 + 15 / 80)})


def test_met_targets_are_their_margin_relative_to_the_target():
    sla = SLA(ttft_p90_ms=740, min_tok_s_per_user_p90=13)
    m = summarize(FOUR, sla=sla)  # p90 TTFT 370 ms, p90 speed 65 tok/s
    assert sla_violations(m, sla) == pytest.approx(
        {"errors": 0.0, "ttft_p90_ms": -0.5, "tok_s_per_user_p90": -4.0})


def test_only_set_targets_become_constraints_and_errors_always_do():
    m = summarize(FOUR)
    assert sla_violations(m, SLA()) == {"errors": 0.0}
    assert set(sla_violations(m, SLA(ttft_p90_ms=1))) == {"errors", "ttft_p90_ms"}
    assert set(sla_violations(m, SLA(min_tok_s_per_user_p90=1))) == {"errors",
                                                                    "tok_s_per_user_p90"}


def test_figures_that_could_not_be_measured_are_a_large_finite_violation():
    sla = SLA(ttft_p90_ms=100, min_tok_s_per_user_p90=10)
    m = summarize([failed("x")], sla=sla)
    assert sla_violations(m, sla) == {"errors": 0.5, "ttft_p90_ms": MISSING_VIOLATION,
                                      "tok_s_per_user_p90": MISSING_VIOLATION}


@pytest.mark.parametrize("results", [FOUR, [*FOUR, failed("x")], FOUR[:1]])
@pytest.mark.parametrize("sla", [SLA(), SLA(ttft_p90_ms=300), SLA(ttft_p90_ms=500),
                                 SLA(min_tok_s_per_user_p90=60),
                                 SLA(ttft_p90_ms=500, min_tok_s_per_user_p90=70)])
def test_constraints_are_satisfied_exactly_when_the_level_meets_the_sla(results, sla):
    m = summarize(results, sla=sla)
    assert all(v <= 0 for v in sla_violations(m, sla).values()) == m.meets_sla


# rounds, confidence intervals and the engine's gauges (summarize_level over repeated rounds)


def test_one_round_keeps_the_single_measurement_with_no_interval():
    m = summarize(FOUR)
    assert (m.rounds, m.output_tok_s_ci95, m.converged) == (1, None, None)
    assert m.output_tok_s == pytest.approx(4 * 101 / 2.0)


def test_rates_are_the_mean_over_rounds_and_percentiles_pool_every_round():
    from tuner.measure.loadgen import RoundRun

    first, second = FOUR[:2], FOUR[2:]
    rounds = [RoundRun(first, 1.0), RoundRun(second, 4.0)]
    run = LevelRun(concurrency=4, results=first + second, duration_s=5.0, rounds=rounds)
    m = summarize_level(run, 2, SLA(ttft_p90_ms=250), ci_target=0.05)
    # Round throughputs 202 and 50.5 tok/s: the mean, not 404 tokens / 5 s.
    assert m.output_tok_s == pytest.approx((202 + 50.5) / 2)
    assert m.output_tok_s_per_gpu == pytest.approx((202 + 50.5) / 4)
    assert m.request_throughput == pytest.approx((2 / 1 + 2 / 4) / 2)
    assert m.goodput_rps == pytest.approx((2 / 1 + 0 / 4) / 2)  # 0.3 and 0.4 s miss 250 ms
    # t(1) = 12.706; s = |202 - 50.5| / sqrt(2); half = t * s / sqrt(2)
    assert m.output_tok_s_ci95 == pytest.approx(12.7062 * (202 - 50.5) / 2, rel=1e-4)
    assert (m.rounds, m.converged, m.duration_s, m.requests) == (2, False, 5.0, 4)
    assert m.ttft_p50_ms == pytest.approx(250)  # pooled over both rounds


def test_steady_rounds_converge_within_the_target():
    from tuner.measure.loadgen import RoundRun

    rounds = [RoundRun(FOUR, d) for d in (2.0, 2.02, 1.98)]
    run = LevelRun(concurrency=4, results=FOUR * 3, duration_s=6.0, rounds=rounds)
    assert summarize_level(run, 1, SLA(), ci_target=0.05).converged is True
    assert summarize_level(run, 1, SLA(), ci_target=0.001).converged is False


def test_a_level_whose_rounds_ran_out_says_how_much_they_varied_and_what_the_target_takes():
    from tuner.measure.loadgen import RoundRun
    from tuner.measure.metrics import convergence_note

    # Rounds of 1 s each at 404, 367, 449, 404 tok/s (the same 404 tokens over 1, 1.1, 0.9, 1 s).
    rounds = [RoundRun(FOUR, d) for d in (1.0, 1.1, 0.9, 1.0)]
    run = LevelRun(concurrency=4, results=FOUR * 4, duration_s=4.0, rounds=rounds)
    m = summarize_level(run, 1, SLA(), ci_target=0.05)
    assert m.converged is False
    rates = [404 / d for d in (1.0, 1.1, 0.9, 1.0)]
    spread = np.std(rates, ddof=1) / np.mean(rates)  # 8.2%
    note = convergence_note(m, 0.05, max_rounds=4)
    assert f"its 4 rounds of 1.0 s each varied {spread:.1%} (sd/mean)" in note
    assert "±5% takes about 13 such rounds" in note  # t(12) * 0.082 / sqrt(13) <= 0.05
    assert note.endswith("raise workload.max_rounds (or ci_target)")
    # The same rounds stopped before max_rounds were cut short, not run out.
    assert convergence_note(m, 0.05, max_rounds=6).startswith(
        "not converged: stopped after 4 of 6 rounds")
    # Converged, or measured once: nothing to say.
    steady = summarize_level(LevelRun(concurrency=4, results=FOUR * 3, duration_s=6.0, rounds=[
        RoundRun(FOUR, d) for d in (2.0, 2.02, 1.98)]), 1, SLA(), ci_target=0.05)
    assert convergence_note(steady, 0.05, max_rounds=6) is None
    assert convergence_note(summarize(FOUR), 0.05, max_rounds=1) is None


def test_ttft_and_itl_means_pool_requests_and_their_intervals_take_rounds_as_samples():
    from tuner.measure.loadgen import RoundRun

    m = summarize(FOUR)
    assert m.ttft_mean_ms == pytest.approx(250)
    # Per-request mean gaps: 15, 30, 40 ms (the fourth has none): mean 28.33, not 25 over gaps.
    assert m.itl_mean_ms == pytest.approx((15 + 30 + 40) / 3)
    assert m.ttft_mean_ci95_ms is None and m.itl_mean_ci95_ms is None  # one round: no interval
    # Batch means: rounds of TTFTs (100, 200) and (300, 400) ms have means 150 and 350;
    # t(1) = 12.706, s = 141.42, half = t * s / sqrt(2).
    run = LevelRun(concurrency=4, results=FOUR, duration_s=2.0,
                   rounds=[RoundRun(FOUR[:2], 1.0), RoundRun(FOUR[2:], 1.0)])
    two = summarize_level(run, 1, SLA())
    assert two.ttft_mean_ms == pytest.approx(250)
    assert two.ttft_mean_ci95_ms == pytest.approx(12.7062 * np.std([150, 350], ddof=1)
                                                  / math.sqrt(2), rel=1e-4)
    per_round_itl = [(15 + 30) / 2, 40]  # the fourth request has no gaps
    assert two.itl_mean_ci95_ms == pytest.approx(12.7062 * np.std(per_round_itl, ddof=1)
                                                 / math.sqrt(2), rel=1e-4)


def test_the_engine_gauges_sampled_during_the_level_are_kept_and_absent_ones_stay_none():
    from tuner.measure.records import EngineGauges

    gauges = EngineGauges(kv_cache_usage_max=0.42, requests_running_max=8, requests_waiting_max=3,
                          preemptions=2, samples=10)
    run = LevelRun(concurrency=4, results=FOUR, duration_s=2.0, engine=gauges)
    m = summarize_level(run, 1, SLA())
    assert (m.kv_cache_usage_max, m.requests_running_max, m.requests_waiting_max,
            m.preemptions) == (0.42, 8, 3, 2)
    bare = summarize(FOUR)
    assert (bare.kv_cache_usage_max, bare.requests_running_max, bare.requests_waiting_max,
            bare.preemptions) == (None, None, None, None)


def test_an_open_loop_level_keeps_its_offered_rate():
    run = LevelRun(concurrency=64, results=FOUR, duration_s=2.0, request_rate=2.5)
    assert summarize_level(run, 1, SLA()).request_rate == 2.5
    assert summarize(FOUR).request_rate is None
