"""Streaming load generator for OpenAI-compatible servers: a sweep of levels, closed loop
(continuous workers, a fixed number in flight) or open loop (Poisson arrivals at a rate), each
measured in one or more rounds. One request's body, send and timing are `tuner.measure.client`'s.

A closed loop also runs conversations (`Conversation`): a worker takes one and sends its turns
one after another, each once the previous one ended, as a user does; the workers' conversations
run side by side. Each turn is a request of the level like any other.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from tuner.measure.client import (
    PATHS,
    Api,
    Clock,
    Conversation,
    PromptLike,
    fewer_collections,
    request_body,
    send_request,
)
from tuner.measure.records import RequestResult
from tuner.measure.stats import converged


@dataclass
class RoundRun:
    """One round of a level: its timed requests and its own duration.

    Closed loop, a round is a window of the continuous run: `results` are the requests that
    started and ended inside it (the latency sample), `output_tokens` every token of the
    requests that completed inside it (the throughput, whenever they started). Open loop, a
    round is its own batch of arrivals, and both come from `results`."""

    results: list[RequestResult]
    duration_s: float  # closed loop: the window; open loop: first arrival to last completion
    output_tokens: int | None = None  # completed inside the window; None: from `results`
    # Open loop: requests that found the in-flight cap reached and waited for a free slot, and
    # the rate they were sent at (`Arrivals.sent_rate`); None closed loop.
    capped: int | None = None
    sent_rate: float | None = None
    # Closed loop: the window's (begin, end) on the perf_counter clock, so a round can be placed
    # beside another client's run on the same machine; None open loop.
    span: tuple[float, float] | None = None

    @property
    def output_tok_s(self) -> float:
        tokens = (self.output_tokens if self.output_tokens is not None
                  else sum(r.output_tokens or 0 for r in self.results if r.ok))
        return tokens / self.duration_s if self.duration_s > 0 else 0.0


@dataclass
class LevelRun:
    """The timed requests of one level, as measured; `metrics` turns it into a row."""

    concurrency: int  # in flight at most: exactly, closed loop; the cap, open loop
    results: list[RequestResult]  # timed requests of every round (warm-up excluded)
    duration_s: float  # the rounds' durations added up
    rounds: list[RoundRun] = field(default_factory=list)  # empty: one round of `results`
    request_rate: float | None = None  # open loop: the offered requests per second
    engine: Any = None  # what the level's monitor returned (the engine's gauges), if any
    sent: int | None = None  # prompts taken, warm-up included; None: warm-up + rounds x requests
    # The client's own cost over the level, warm-up included: its event loop's CPU seconds and
    # the wall seconds they were spent in. Near 1 CPU-s per wall-s, the client was saturated.
    client_cpu_s: float | None = None
    client_wall_s: float | None = None

    @property
    def client_cpu_use(self) -> float | None:
        """The client's CPU seconds per wall second over the level (1.0: one core, saturated)."""
        if self.client_cpu_s is None or not self.client_wall_s:
            return None
        return self.client_cpu_s / self.client_wall_s

    def round_runs(self) -> list[RoundRun]:
        return self.rounds or [RoundRun(self.results, self.duration_s)]


# Rounds before the stopping rule may end a level: with two, one degree of freedom, a lucky
# pair stops early on an interval that means little (optional stopping).
MIN_ROUNDS = 3


@dataclass(frozen=True)
class Repeats:
    """Measure a level in rounds until output tok/s is known within `ci_target` (the 95%
    half-width as a fraction of the mean), at least MIN_ROUNDS rounds and at most `max_rounds`;
    max_rounds 1 is a single measurement. `cut_short`, asked after each round but the last with
    the rounds' output tok/s, ends the level early when it says so (the search prunes a level
    clearly below the incumbent)."""

    max_rounds: int = 1
    ci_target: float = 0.05
    cut_short: Callable[[list[float]], bool] | None = None

    def done(self, round_tok_s: list[float]) -> bool:
        if len(round_tok_s) >= self.max_rounds:
            return True
        if self.cut_short is not None and self.cut_short(round_tok_s):
            return True
        return len(round_tok_s) >= MIN_ROUNDS and converged(round_tok_s, self.ci_target)


# Called once a level's warm-up is over with the session and an event set when its last round
# ends; what it returns is kept on the LevelRun (tuner.measure.engine_metrics samples /metrics
# with it).
Monitor = Callable[[aiohttp.ClientSession, asyncio.Event], Awaitable[Any]]


async def _run_fixed_concurrency(
    session: aiohttp.ClientSession, url: str, bodies: Iterator[bytes], concurrency: int,
    timeout: aiohttp.ClientTimeout,
) -> list[RequestResult]:
    """Send every body with at most `concurrency` in flight: workers pull from one iterator."""
    results: list[RequestResult] = []

    async def worker() -> None:
        # One shared iterator: the loop is single-threaded, so next() hands each body out once.
        for body in bodies:
            results.append(await send_request(session, url, body, timeout))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def _bodies(api: Api, model: str, prompts: Sequence[PromptLike], first: int, count: int | None,
            output_len: int) -> Iterator[bytes | tuple[bytes, ...]]:
    # Built lazily, just before each send, so memory stays flat whatever the request count;
    # count None: endless (the closed loop takes what it needs). A conversation: its turns'.
    n = len(prompts)
    indices = itertools.count(first) if count is None else range(first, first + count)
    for i in indices:
        prompt = prompts[i % n]
        if isinstance(prompt, Conversation):
            yield tuple(request_body(api, model, t, output_len) for t in prompt.turns)
        else:
            yield request_body(api, model, prompt, output_len)


async def _closed_loop(
    session: aiohttp.ClientSession, url: str, bodies: Iterator[bytes], concurrency: int,
    timeout: aiohttp.ClientTimeout, warmup: int, requests: int,
    enough: Callable[[list[RoundRun]], bool], measuring: Callable[[], None],
    clock: Clock = time.perf_counter,
) -> tuple[list[RoundRun], int]:
    """Closed loop as continuous workers: `concurrency` clients, each sending its next request
    as soon as its previous one ends, from the warm-up through every round, never drained.

    The warm-up is the first `warmup` completions. Each round is then a window that ends at
    the `requests`-th completion after it began: its throughput is every token completed inside
    it over its length, its latency sample the requests that started and ended inside it (so
    none that began in the warm-up or an earlier round). `measuring()` is called once the
    warm-up is over; rounds stop when `enough(rounds)` says so. Requests still in flight at the
    end are cancelled and left out. Returns the rounds and the prompts taken.
    """
    completed: list[RequestResult] = []  # in completion order
    progress = asyncio.Event()
    sent = taken = 0

    async def worker() -> None:
        nonlocal sent, taken
        for item in bodies:  # one shared iterator: each prompt is handed out once
            taken += 1
            # A conversation's turns in order, each sent once the previous one ended.
            for body in item if isinstance(item, tuple) else (item,):
                index, sent = sent, sent + 1
                result = await send_request(session, url, body, timeout, clock)
                result.index = index
                completed.append(result)
                progress.set()

    async def until(count: int) -> None:
        while len(completed) < count:
            progress.clear()
            await progress.wait()

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    rounds: list[RoundRun] = []
    try:
        await until(warmup)
        begin = max(r.end for r in completed[:warmup]) if warmup else clock()
        measuring()
        done = warmup
        while True:
            await until(done + requests)
            window = completed[done: done + requests]
            done += requests
            end = max(r.end for r in window)
            rounds.append(RoundRun(
                results=[r for r in window if r.start >= begin], duration_s=end - begin,
                output_tokens=sum(r.output_tokens or 0 for r in window if r.ok),
                span=(begin, end)))
            begin = end
            # A window where every request failed has no throughput to pin down: stop there.
            if not any(r.ok for r in window) or enough(rounds):
                break
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return rounds, taken


def poisson_gaps(rate: float, rng: random.Random) -> Iterator[float]:
    """Endless gaps (s) between arrivals of a Poisson process at `rate` per second: exponential,
    mean 1 / rate, drawn from `rng` so a seed gives the same schedule every run."""
    if rate <= 0:
        raise ValueError(f"request rate must be > 0, got {rate}")
    while True:
        yield rng.expovariate(rate)


@dataclass
class Arrivals:
    """One batch of open-loop arrivals as sent: each request's result (timed from its scheduled
    arrival), how many found the in-flight cap reached and waited for a slot, and the rate
    they were sent at: (n - 1) gaps over the time from the first scheduled arrival to the last
    send (None for fewer than two), which falls below the offered rate when the cap or the
    client held sends back."""

    results: list[RequestResult]
    capped: int
    sent_rate: float | None


async def _run_poisson(
    session: aiohttp.ClientSession, url: str, bodies: Iterator[bytes], rate: float, cap: int,
    timeout: aiohttp.ClientTimeout, rng: random.Random, clock: Clock = time.perf_counter,
) -> Arrivals:
    """Open loop: send each body at its scheduled arrival, whether or not earlier ones finished.

    Arrivals sit on absolute times (start + the sum of gaps), so a late wake-up does not push
    every later send back. The cap (requests in flight) holds a send back only when reached;
    set it above what the rate can pile up and it never does. Each request is timed from its
    scheduled arrival, not from its send (`from_arrival`): a request the cap or a late wake-up
    held back has waited, as a user would have, so TTFT and latency include that wait rather
    than hide the queue (coordinated omission). The requests the cap held back are counted.
    """
    slots = asyncio.Semaphore(cap)
    tasks: list[asyncio.Task[RequestResult]] = []
    gaps = poisson_gaps(rate, rng)
    capped, first, last_send = 0, None, None

    async def send(body: bytes, arrival: float) -> RequestResult:
        try:
            return from_arrival(await send_request(session, url, body, timeout, clock), arrival)
        finally:
            slots.release()

    due = clock()
    for body in bodies:
        delay = due - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        if slots.locked():
            capped += 1
        await slots.acquire()
        first = due if first is None else first
        last_send = clock()
        tasks.append(asyncio.create_task(send(body, due)))
        due += next(gaps)
    results = list(await asyncio.gather(*tasks))
    span = None if first is None else last_send - first
    sent_rate = (len(results) - 1) / span if len(results) > 1 and span else None
    return Arrivals(results, capped, sent_rate)


def from_arrival(result: RequestResult, arrival: float) -> RequestResult:
    """The request timed from when it was due to arrive: its wait before the send is added to
    its time to first token and its latency (gaps between tokens are unchanged)."""
    wait = max(0.0, result.start - arrival)
    if not wait:
        return result
    return replace(result, start=arrival,
                   ttft_s=None if result.ttft_s is None else result.ttft_s + wait,
                   latency_s=None if result.latency_s is None else result.latency_s + wait)


async def run_level(
    session: aiohttp.ClientSession, base_url: str, model: str, prompts: Sequence[PromptLike],
    concurrency: int, requests: int, output_len: int, request_timeout_s: float,
    warmup_requests: int = 0, *, api: Api = "completions", rate: float | None = None,
    repeats: Repeats = Repeats(), seed: int = 0, monitor: Monitor | None = None,
    stop: Callable[[], bool] | None = None,
) -> LevelRun:
    """A warm-up of `warmup_requests` untimed, then rounds of `requests` timed ones, until
    `repeats` is satisfied, a round's requests all failed, or `stop()` says so (checked between
    rounds).

    Closed loop (rate None): `concurrency` continuous workers, never drained between warm-up
    and rounds (`_closed_loop`). Open loop: Poisson arrivals at `rate` per second from a
    generator seeded with `seed`, at most `concurrency` in flight, each round its own batch of
    arrivals; the warm-up arrives the same way and is waited for, so no timed round starts on
    its tail. Prompts are taken in order and cycled: warm-up takes the first ones, rounds the
    next, so no prompt repeats (and hits the prefix cache) while there are enough of them.
    """
    if concurrency < 1 or requests < 0 or warmup_requests < 0:
        raise ValueError(f"need concurrency >= 1, requests and warm-up >= 0: "
                         f"{concurrency}, {requests}, {warmup_requests}")
    if not prompts:
        raise ValueError("no prompts")
    if rate is not None and isinstance(prompts[0], Conversation):
        raise ValueError("conversations run in a closed loop: their turns wait for each other")
    url = base_url.rstrip("/") + PATHS[api]
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    rng = random.Random(seed)

    async def send_all(first: int, count: int) -> RoundRun:
        bodies = _bodies(api, model, prompts, first, count, output_len)
        if rate is None:
            results = await _run_fixed_concurrency(session, url, bodies, min(concurrency, count),
                                                   timeout)
            return RoundRun(results, _duration(results))
        sent = await _run_poisson(session, url, bodies, rate, concurrency, timeout, rng)
        return RoundRun(sent.results, _duration(sent.results), capped=sent.capped,
                        sent_rate=sent.sent_rate)

    done = asyncio.Event()
    watching: asyncio.Future | None = None

    def measuring() -> None:
        nonlocal watching
        if monitor is not None:
            watching = asyncio.ensure_future(monitor(session, done))

    def enough(rounds: list[RoundRun]) -> bool:
        return repeats.done([r.output_tok_s for r in rounds]) or (stop is not None and stop())

    if rate is None and requests:
        try:
            rounds, sent = await _closed_loop(
                session, url, _bodies(api, model, prompts, 0, None, output_len), concurrency,
                timeout, warmup_requests, requests, enough, measuring)
        finally:
            done.set()
            engine = await watching if watching is not None else None
        return LevelRun(concurrency=concurrency,
                        results=[r for rnd in rounds for r in rnd.results],
                        duration_s=sum(rnd.duration_s for rnd in rounds), rounds=rounds,
                        request_rate=None, engine=engine, sent=sent)
    if warmup_requests > 0:
        await send_all(0, warmup_requests)
    measuring()
    rounds = []
    try:
        while True:
            first = warmup_requests + len(rounds) * requests
            rnd = await send_all(first, requests) if requests else RoundRun([], 0.0)
            rounds.append(rnd)
            results = rnd.results
            # A round where every request failed has no throughput to pin down: stop there.
            dead = bool(results) and not any(r.ok for r in results)
            if dead or enough(rounds):
                break
    finally:
        done.set()
        engine = await watching if watching is not None else None
    pooled = [r for rnd in rounds for r in rnd.results]
    return LevelRun(concurrency=concurrency, results=pooled,
                    duration_s=sum(rnd.duration_s for rnd in rounds), rounds=rounds,
                    request_rate=rate, engine=engine)


def _duration(results: list[RequestResult]) -> float:
    if not results:
        return 0.0
    first_send = min(r.start for r in results)
    last_end = max(r.end for r in results if r.end is not None)
    return last_end - first_send


# A level of a sweep: its concurrency (closed loop) or in-flight cap (open loop), and its
# offered request rate (None: closed loop).
Level = tuple[int, float | None]


def run_sweep(
    base_url: str, model: str, prompts: Sequence[PromptLike], levels: list[int],
    requests_per_level: int, output_len: int, warmup_requests: int, request_timeout_s: float,
    on_level: Callable[[LevelRun], None] | None = None, stop: Callable[[], bool] | None = None,
    *, api: Api = "completions", rates: list[float] | None = None,
    repeats: Repeats = Repeats(), seed: int = 0, monitor: Monitor | None = None,
    plan: Iterable[Level] | None = None,
) -> list[LevelRun]:
    """Run the levels in order on one connection pool; return what was measured.

    Closed loop: one level per concurrency in `levels`. Open loop (`rates` given): one level per
    rate, each capped at max(levels) in flight, with arrivals seeded from `seed` and the level's
    position. `plan`, when given, is the levels instead, taken one at a time as the sweep goes:
    an iterator may decide each from the levels measured so far (`on_level` has seen them: a
    load search), and `levels` then only sizes the connection pool (its largest value: the most
    in flight any planned level has). Each level has its own warm-up. `on_level` is called
    after each level (e.g. to store it); `stop()` is checked before each level and between
    rounds, and True ends the sweep early (the server died). Prompts continue across levels,
    so none repeats while
    len(prompts) >= number of levels * (warmup_requests + requests_per_level * max_rounds).
    """
    if not levels:
        return []
    if plan is None:
        plan = ([(max(levels), r) for r in rates] if rates is not None
                else [(c, None) for c in levels])
    with fewer_collections():
        return asyncio.run(_sweep(base_url, model, prompts, plan, max(levels),
                                  requests_per_level, output_len, warmup_requests,
                                  request_timeout_s, on_level, stop, api, repeats, seed,
                                  monitor))


async def _sweep(
    base_url: str, model: str, prompts: Sequence[PromptLike],
    plan: Iterable[Level], pool: int, requests_per_level: int, output_len: int,
    warmup_requests: int, request_timeout_s: float,
    on_level: Callable[[LevelRun], None] | None, stop: Callable[[], bool] | None,
    api: Api, repeats: Repeats, seed: int, monitor: Monitor | None,
) -> list[LevelRun]:
    runs: list[LevelRun] = []
    # The pool admits the largest level at once (plus the monitor's scrape); per-level bounds
    # come from the worker count or the open loop's cap.
    connector = aiohttp.TCPConnector(limit=pool + 1, limit_per_host=0)
    # No session-wide timeout: each request carries its own.
    session_timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=session_timeout) as session:
        offset = 0
        for index, (concurrency, rate) in enumerate(plan):
            if stop is not None and stop():
                break
            rotated = _rotate(prompts, offset)
            # This thread's CPU: parallel trials run their sweeps in threads of one process.
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            run = await run_level(session, base_url, model, rotated, concurrency,
                                  requests_per_level, output_len, request_timeout_s,
                                  warmup_requests, api=api, rate=rate, repeats=repeats,
                                  seed=seed * 1_000_003 + index, monitor=monitor, stop=stop)
            run.client_cpu_s = time.thread_time() - cpu0
            run.client_wall_s = time.perf_counter() - wall0
            offset += (run.sent if run.sent is not None
                       else warmup_requests + requests_per_level * len(run.round_runs()))
            runs.append(run)
            if on_level is not None:
                on_level(run)
    return runs


def _rotate(prompts: Sequence[PromptLike], offset: int) -> list[PromptLike]:
    k = offset % len(prompts) if prompts else 0
    return list(prompts[k:]) + list(prompts[:k])
