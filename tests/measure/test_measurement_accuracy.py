"""What tuner measures is what the server did: against the scripted loopback server, which gives
each request its own TTFT ~ uniform(150, 350) ms and its own ITL ~ uniform(15, 45) ms from a
seeded generator, the measured means land within 5% of the delays the server injected, and the 95%
confidence intervals cover the true means (250 ms and 30 ms).

Why these delays: loopback overhead is a few milliseconds at worst on a busy machine (5% of
250 ms is 12.5 ms), while the spread between requests is tens of milliseconds, so the sampling
spread dominates and the interval is about the sample, not about the machine. The server runs in
its own process (its timetable holds while the client works) and draws in arrival order from
Random(seed), so the test can replay the very delays it injected to the requests that were
timed (each result carries its place in the sends, and sends arrive in that order): the
comparison is with those, not a bet on the machine's speed. Which requests are timed depends on
timing (the closed loop's workers never stop, and a request that spans a round's start is left
out), so the intervals are checked to be the measured rounds' own batch means (exactly), and
that the seed's draws cover the true mean from the replayed draws alone (no timing involved).
"""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from tuner.measure.loadgen import Repeats, poisson_gaps, run_sweep
from tuner.measure.metrics import summarize_level
from tuner.spec.sla import SLA
from tuner.testing.fake_openai_server import Script, serve_in_process

SEED = 8
TTFT = (0.150, 0.350)
ITL = (0.015, 0.045)
WARMUP, PER_ROUND, ROUNDS, CONCURRENCY, OUTPUT = 4, 40, 4, 8, 12
PROMPTS = [[i, i + 1] for i in range(0, 400, 2)]


def draws(n: int) -> list[tuple[float, float]]:
    """The first n (ttft, itl) the server draws, replayed from its seed: a TTFT then an ITL
    per request, as requests arrive."""
    rng = random.Random(SEED)
    return [(rng.uniform(*TTFT), rng.uniform(*ITL)) for _ in range(n)]


def injected(run=None) -> tuple[list[float], list[float]]:
    """The (ttft, itl) injected into the run's timed requests (without a run: the first
    warm-up + rounds x requests after the warm-up, the seed's own sample)."""
    if run is None:
        timed = draws(WARMUP + PER_ROUND * ROUNDS)[WARMUP:]
    else:
        every = draws(run.sent)
        timed = [every[r.index] for r in run.results]
    return [t for t, _ in timed], [i for _, i in timed]


@pytest.fixture(scope="module")
def level():
    script = Script(ttft_range=TTFT, itl_range=ITL, seed=SEED)
    with serve_in_process(script) as (url, _pid):
        (run,) = run_sweep(url, "fake-model", PROMPTS, [CONCURRENCY], PER_ROUND, OUTPUT,
                           WARMUP, request_timeout_s=30,
                           repeats=Repeats(max_rounds=ROUNDS, ci_target=1e-9))
    return run, summarize_level(run, gpus=1, sla=SLA(), ci_target=0.05)


def test_the_means_are_within_5_percent_of_the_injected_delays(level):
    run, m = level
    ttft, itl = injected(run)
    # Each round's 40 completions, less those that started before it (at most 8 in flight).
    assert all(r.ok for r in run.results)
    assert (PER_ROUND - CONCURRENCY) * ROUNDS <= len(run.results) <= PER_ROUND * ROUNDS
    assert m.ttft_mean_ms == pytest.approx(statistics.fmean(ttft) * 1000, rel=0.05)
    assert m.itl_mean_ms == pytest.approx(statistics.fmean(itl) * 1000, rel=0.05)
    assert m.ttft_p50_ms == pytest.approx(statistics.median(ttft) * 1000, rel=0.05)


def test_the_95_percent_intervals_take_the_rounds_as_samples(level):
    # Batch means: the interval comes from the rounds' means (requests in flight together share
    # batches; rounds nearly do not), not from the requests as if independent. Checked on the
    # measured requests themselves, so no machine's timing enters the verdict.
    from tuner.measure.stats import mean_ci

    run, m = level
    ttft_means = [statistics.fmean(r.ttft_s for r in rnd.results) * 1000 for rnd in run.rounds]
    itl_means = [statistics.fmean(statistics.fmean(r.itl_s) for r in rnd.results) * 1000
                 for rnd in run.rounds]
    assert m.ttft_mean_ci95_ms == pytest.approx(mean_ci(ttft_means)[1], rel=1e-6)
    assert m.itl_mean_ci95_ms == pytest.approx(mean_ci(itl_means)[1], rel=1e-6)
    assert len(run.rounds) == ROUNDS


def test_the_seed_draws_a_sample_whose_own_interval_covers_the_truth():
    # The same statement with the injected values alone: this seed is not an unlucky 5%.
    ttft, itl = injected()
    from tuner.measure.stats import mean_ci

    for values, truth in ((ttft, 0.250), (itl, 0.030)):
        mean, half = mean_ci(values)
        assert abs(mean - truth) <= half


def test_repeats_report_rounds_and_an_interval_for_throughput(level):
    run, m = level
    assert m.rounds == ROUNDS == len(run.rounds)
    assert m.output_tok_s_ci95 is not None and m.output_tok_s_ci95 > 0
    assert m.output_tok_s == pytest.approx(statistics.fmean(r.output_tok_s for r in run.rounds))


# open loop: a request is timed from its scheduled arrival, so a queue shows in its TTFT


def queued_starts(arrivals: list[float], slots: int, service_s: float) -> list[float]:
    """When each arrival begins service through `slots` servers of fixed service time, first
    come first served."""
    free = [0.0] * slots
    out = []
    for t in arrivals:
        i = min(range(slots), key=free.__getitem__)
        out.append(max(t, free[i]))
        free[i] = out[-1] + service_s
    return out


def queued_ttfts(arrivals: list[float], slots: int, service_s: float) -> list[float]:
    """TTFT of each arrival through `slots` servers of fixed service time (the first token comes
    at the end of service: one-token responses)."""
    return [begin - t + service_s
            for t, begin in zip(arrivals, queued_starts(arrivals, slots, service_s), strict=True)]


def schedule(rate: float, n: int, seed: int, warmup: int = 0) -> list[float]:
    """The arrival times run_sweep schedules for its first level's timed requests, after a
    warm-up of `warmup` arrivals drawn from the same generator (one gap each)."""
    gaps = itertools.islice(poisson_gaps(rate, random.Random(seed * 1_000_003)),
                            warmup, warmup + n - 1)
    return list(itertools.accumulate(gaps, initial=0.0))


@pytest.mark.parametrize("load", [0.8, 1.2])
def test_open_loop_ttft_includes_the_queue_the_offered_load_builds(load):
    # The client's in-flight cap is the service's slots: at 120% of capacity requests queue
    # before they are sent, and that wait is the user's as much as the server's. A busy machine
    # wakes the server late by some milliseconds per service, and at 120% those add up along the
    # queue (about 25 ms over a 0.2 s service seen here under load): a 0.5 s service keeps that
    # well inside the 10%.
    # An overloaded queue remembers every delay: a late start of its first requests (a new
    # connection, a first request's one-off costs) would shift all that queue behind them, so
    # the timed arrivals start warm, after a warm-up that is waited for, as a trial's do.
    service_s, slots, n, seed, warmup = 0.5, 4, 40, 5, 4
    rate = load * slots / service_s
    with serve_in_process(Script(ttft_s=service_s, tokens=1)) as (url, _pid):
        (run,) = run_sweep(url, "m", PROMPTS, [slots], requests_per_level=n, output_len=1,
                           warmup_requests=warmup, request_timeout_s=60, rates=[rate],
                           seed=seed)
    expected = queued_ttfts(schedule(rate, n, seed, warmup), slots, service_s)
    measured = statistics.mean(r.ttft_s for r in run.results if r.ok)
    assert len([r for r in run.results if r.ok]) == n
    assert measured == pytest.approx(statistics.mean(expected), rel=0.10)
    if load > 1:  # the queue is real: well above the service time alone
        assert statistics.mean(expected) > 1.3 * service_s


def test_the_achieved_rate_and_the_caps_engagement_are_measured_beside_the_offered_rate():
    # 120% of capacity through a cap of 4 slots: the queue the schedule builds holds sends
    # back, so they go out at the service's rate, not the offered one, and the level says how
    # many waited (a 0.5 s service, as above, so a busy machine's late wake-ups stay small).
    service_s, slots, n, seed = 0.5, 4, 40, 5
    rate = 1.2 * slots / service_s
    arrivals = schedule(rate, n, seed)
    starts = queued_starts(arrivals, slots, service_s)
    waited = sum(begin > t for t, begin in zip(arrivals, starts, strict=True))
    with serve_in_process(Script(ttft_s=service_s, tokens=1)) as (url, _pid):
        (run,) = run_sweep(url, "m", PROMPTS, [slots], requests_per_level=n, output_len=1,
                           warmup_requests=0, request_timeout_s=60, rates=[rate], seed=seed)
    m = summarize_level(run, 1, SLA())
    assert m.request_rate == rate
    assert m.achieved_request_rate == pytest.approx((n - 1) / starts[-1], rel=0.10)
    assert m.achieved_request_rate < 0.9 * rate
    assert m.cap_engaged and m.capped_requests == pytest.approx(waited, rel=0.2)


def test_an_open_loop_under_its_cap_delivers_the_offered_schedule():
    # A cap of 64 against 1 ms requests at 20/s: it never fills.
    rate, n, seed = 20.0, 20, 3
    with serve_in_process(Script(ttft_s=0.001, tokens=1)) as (url, _pid):
        (run,) = run_sweep(url, "m", PROMPTS, [64], requests_per_level=n, output_len=1,
                           warmup_requests=0, request_timeout_s=60, rates=[rate], seed=seed)
    m = summarize_level(run, 1, SLA())
    arrivals = schedule(rate, n, seed)
    assert m.capped_requests == 0 and not m.cap_engaged
    assert m.achieved_request_rate == pytest.approx((n - 1) / arrivals[-1], rel=0.10)


def test_a_closed_loop_level_has_no_achieved_rate_or_cap():
    with serve_in_process(Script(ttft_s=0.001, tokens=1)) as (url, _pid):
        (run,) = run_sweep(url, "m", PROMPTS, [2], requests_per_level=4, output_len=1,
                           warmup_requests=0, request_timeout_s=60)
    m = summarize_level(run, 1, SLA())
    assert (m.achieved_request_rate, m.capped_requests, m.cap_engaged) == (None, None, False)
