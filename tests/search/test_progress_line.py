"""The live progress line of each measured level says how far its throughput can be trusted."""

from __future__ import annotations

from dataclasses import replace

from tuner.search.trial import level_line
from tuner.store.records import LevelMeasurement

LEVEL = LevelMeasurement(
    concurrency=16, requests=48, errors=0, duration_s=6.0, input_tokens=1, output_tokens=1,
    request_throughput=8.0, output_tok_s=400.0, output_tok_s_per_gpu=400.0, ttft_p50_ms=20.0,
    ttft_p90_ms=30.0, ttft_p99_ms=35.0, itl_p50_ms=5.0, itl_p90_ms=8.0, itl_p99_ms=9.0,
    tpot_p50_ms=6.0, tpot_p90_ms=7.0, e2e_p50_ms=400.0, e2e_p90_ms=450.0,
    tok_s_per_user_p50=160.0, tok_s_per_user_p90=140.0, goodput_rps=8.0, meets_sla=True)


def test_a_single_measurement_shows_no_interval():
    line = level_line(replace(LEVEL, rounds=1))
    assert line.lstrip().startswith("c=16") and "±" not in line and "rounds" not in line


def test_repeated_levels_show_the_interval_and_say_when_they_did_not_converge():
    ok = level_line(replace(LEVEL, rounds=3, output_tok_s_ci95=12.0, converged=True))
    assert "400 tok/s/GPU ±3.0%" in ok and "3 rounds" in ok and "NOT CONVERGED" not in ok
    bad = level_line(replace(LEVEL, rounds=5, output_tok_s_ci95=60.0, converged=False))
    assert "±15.0%" in bad and "5 rounds, NOT CONVERGED" in bad


def test_an_open_loop_level_is_named_by_its_rate():
    assert level_line(replace(LEVEL, request_rate=2.5)).lstrip().startswith("2.5 req/s")


def test_an_open_loop_level_says_the_rate_it_delivered_and_when_the_cap_engaged():
    free = level_line(replace(LEVEL, request_rate=4.0, achieved_request_rate=3.96,
                              capped_requests=0))
    assert free.lstrip().startswith("4 req/s (sent 3.96/s)") and "cap engaged" not in free
    capped = level_line(replace(LEVEL, request_rate=8.0, achieved_request_rate=5.5,
                                capped_requests=12))
    assert "8 req/s (sent 5.5/s)" in capped
    assert ("cap engaged: 12 of 48 waited for one of 16 slots (the offered rate was not "
            "delivered)") in capped
