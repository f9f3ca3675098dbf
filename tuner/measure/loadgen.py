"""Streaming load generator for OpenAI-compatible `/v1/completions` and `/v1/chat/completions`:
a sweep of levels, closed loop (a fixed number in flight) or open loop (Poisson arrivals at a
rate), each measured in one or more rounds, each request timed with `time.perf_counter()`.

The client shares the CPUs with the server it measures, so the per-chunk path does only what it
must: parse the JSON, read the clock, append one gap. Requests never raise: a failure is a
`RequestResult(ok=False, error=...)`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from tuner.measure.records import RequestResult
from tuner.measure.sse import error_of, has_choice, iter_sse_events, usage_of
from tuner.measure.stats import converged

Clock = Callable[[], float]
Api = Literal["completions", "chat"]

COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
PATHS: dict[str, str] = {"completions": COMPLETIONS_PATH, "chat": CHAT_PATH}
_HEADERS = {"Content-Type": "application/json"}
# What a request can fail with on the wire (ValueError: bad JSON, UTF-8 or SSE; HttpProcessingError:
# a malformed HTTP response); anything else is a bug and should surface.
_REQUEST_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError,
                   HttpProcessingError)
_ERROR_TEXT_MAX = 200


@dataclass(frozen=True)
class Prompt:
    """One request's input as sent: token ids or text (completions), or messages (chat).

    `output_len` overrides the sweep's (a dataset's reply length); None keeps it.
    """

    tokens: list[int] | None = None
    text: str | None = None
    messages: list[dict[str, str]] | None = None
    output_len: int | None = None


PromptLike = list[int] | Prompt


@dataclass
class RoundRun:
    """One round of a level: its timed requests and its own duration."""

    results: list[RequestResult]
    duration_s: float  # first send to last completion of this round

    @property
    def output_tok_s(self) -> float:
        tokens = sum(r.output_tokens or 0 for r in self.results if r.ok)
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

    def round_runs(self) -> list[RoundRun]:
        return self.rounds or [RoundRun(self.results, self.duration_s)]


@dataclass(frozen=True)
class Repeats:
    """Measure a level in rounds until output tok/s is known within `ci_target` (the 95%
    half-width as a fraction of the mean), at least two rounds and at most `max_rounds`;
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
        return len(round_tok_s) >= 2 and converged(round_tok_s, self.ci_target)


# Called once a level's warm-up is over with the session and an event set when its last round
# ends; what it returns is kept on the LevelRun (tuner.measure.engine_metrics samples /metrics
# with it).
Monitor = Callable[[aiohttp.ClientSession, asyncio.Event], Awaitable[Any]]


def completion_body(model: str, prompt: list[int] | str, output_len: int) -> bytes:
    """The request body: exactly `output_len` tokens (ignore_eos), greedy, streamed, usage last."""
    return json.dumps({
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()


def chat_body(model: str, messages: list[dict[str, str]], output_len: int) -> bytes:
    """The chat request body, with the same generation rules as `completion_body`; the server
    renders `messages` with the model's chat template."""
    return json.dumps({
        "model": model,
        "messages": messages,
        "max_completion_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()


def request_body(api: Api, model: str, prompt: PromptLike, output_len: int) -> bytes:
    """The body for one prompt on `api`; a prompt's own output_len wins over the sweep's."""
    if not isinstance(prompt, Prompt):
        prompt = Prompt(tokens=prompt)
    n = prompt.output_len or output_len
    if api == "chat":
        if prompt.messages is not None:
            return chat_body(model, prompt.messages, n)
        if prompt.text is None:
            raise ValueError("a chat request needs text or messages, not token ids")
        return chat_body(model, [{"role": "user", "content": prompt.text}], n)
    if prompt.messages is not None:
        raise ValueError("a completions request cannot send chat messages: use api chat")
    return completion_body(model, prompt.tokens if prompt.tokens is not None else prompt.text, n)


async def measure_stream(
    events: AsyncIterable[dict[str, Any]], start: float, clock: Clock = time.perf_counter
) -> RequestResult:
    """Time one response stream that was sent at `start`.

    TTFT is the first event carrying a choice, each ITL the gap between successive choice events
    (empty-text ones included), latency runs to the end of the stream. So, by construction,
    latency - ttft == sum(itl) + (end of stream - last choice event). Tokens come from `usage`.
    """
    first = last = None
    itl: list[float] = []
    usage: tuple[int, int] | None = None
    async for event in events:
        now = clock()
        if has_choice(event):
            if first is None:
                first = now
            else:
                itl.append(now - last)
            last = now
        event_usage = usage_of(event)
        if event_usage is not None:
            usage = event_usage
        error = error_of(event)
        if error is not None:
            return _failure(start, now, f"server error event: {error}")
    end = clock()
    if first is None:
        return _failure(start, end, "stream ended without a token")
    if usage is None:
        return _failure(start, end, "stream ended without usage")
    return RequestResult(
        ok=True, start=start, ttft_s=first - start, itl_s=itl, latency_s=end - start,
        prompt_tokens=usage[0], output_tokens=usage[1],
    )


def _failure(start: float, end: float, error: str) -> RequestResult:
    # latency_s on a failure is the time to failure: it keeps the level's duration honest.
    return RequestResult(ok=False, start=start, latency_s=end - start,
                         error=error[:_ERROR_TEXT_MAX])


async def send_request(
    session: aiohttp.ClientSession, url: str, body: bytes, timeout: aiohttp.ClientTimeout,
    clock: Clock = time.perf_counter,
) -> RequestResult:
    """POST one streamed completion and time it; every failure comes back as ok=False."""
    start = clock()
    try:
        async with session.post(url, data=body, headers=_HEADERS, timeout=timeout) as resp:
            if resp.status != 200:
                text = (await resp.text(errors="replace")).strip()
                return _failure(start, clock(), f"HTTP {resp.status}: {text}")
            async with aclosing(iter_sse_events(resp.content.iter_any())) as events:
                result = await measure_stream(events, start, clock)
            if result.ok:
                await _drain(resp)
            return result
    except _REQUEST_ERRORS as e:
        return _failure(start, clock(), _describe(e))


def _describe(e: BaseException) -> str:
    # A total timeout raises TimeoutError with no message; the type alone says it.
    text = str(e).strip()
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


async def _drain(resp: aiohttp.ClientResponse) -> None:
    # Read past [DONE] to the end of the body so the connection goes back to the pool instead of
    # being closed; the measurement is already complete, so a failure here changes nothing.
    try:
        await resp.read()
    except _REQUEST_ERRORS:
        pass


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


def _bodies(api: Api, model: str, prompts: Sequence[PromptLike], first: int, count: int,
            output_len: int) -> Iterator[bytes]:
    # Built lazily, just before each send, so memory stays flat whatever the request count.
    n = len(prompts)
    for i in range(first, first + count):
        yield request_body(api, model, prompts[i % n], output_len)


def poisson_gaps(rate: float, rng: random.Random) -> Iterator[float]:
    """Endless gaps (s) between arrivals of a Poisson process at `rate` per second: exponential,
    mean 1 / rate, drawn from `rng` so a seed gives the same schedule every run."""
    if rate <= 0:
        raise ValueError(f"request rate must be > 0, got {rate}")
    while True:
        yield rng.expovariate(rate)


async def _run_poisson(
    session: aiohttp.ClientSession, url: str, bodies: Iterator[bytes], rate: float, cap: int,
    timeout: aiohttp.ClientTimeout, rng: random.Random, clock: Clock = time.perf_counter,
) -> list[RequestResult]:
    """Open loop: send each body at its scheduled arrival, whether or not earlier ones finished.

    Arrivals sit on absolute times (start + the sum of gaps), so a late wake-up does not push
    every later send back. The cap (requests in flight) holds a send back only when reached;
    set it above what the rate can pile up and it never does. Each request is timed from its
    scheduled arrival, not from its send (`from_arrival`): a request the cap or a late wake-up
    held back has waited, as a user would have, so TTFT and latency include that wait rather
    than hide the queue (coordinated omission).
    """
    slots = asyncio.Semaphore(cap)
    tasks: list[asyncio.Task[RequestResult]] = []
    gaps = poisson_gaps(rate, rng)

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
        await slots.acquire()
        tasks.append(asyncio.create_task(send(body, due)))
        due += next(gaps)
    return list(await asyncio.gather(*tasks))


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
    """Send `warmup_requests` untimed, then rounds of `requests` timed ones, until `repeats` is
    satisfied, a round's requests all failed, or `stop()` says so (checked between rounds).

    Closed loop (rate None): `concurrency` in flight. Open loop: Poisson arrivals at `rate` per
    second from a generator seeded with `seed`, at most `concurrency` in flight; the warm-up
    arrives the same way and is waited for, so no timed round starts on its tail.
    Prompts are taken in order and cycled: warm-up takes the first ones, rounds the next, so no
    prompt repeats (and hits the prefix cache) while len(prompts) >= warm-up + all rounds.
    """
    if concurrency < 1 or requests < 0 or warmup_requests < 0:
        raise ValueError(f"need concurrency >= 1, requests and warm-up >= 0: "
                         f"{concurrency}, {requests}, {warmup_requests}")
    if not prompts:
        raise ValueError("no prompts")
    url = base_url.rstrip("/") + PATHS[api]
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    rng = random.Random(seed)

    async def send_all(first: int, count: int) -> list[RequestResult]:
        bodies = _bodies(api, model, prompts, first, count, output_len)
        if rate is None:
            return await _run_fixed_concurrency(session, url, bodies, min(concurrency, count),
                                                timeout)
        return await _run_poisson(session, url, bodies, rate, concurrency, timeout, rng)

    if warmup_requests > 0:
        await send_all(0, warmup_requests)
    done = asyncio.Event()
    watching = asyncio.ensure_future(monitor(session, done)) if monitor is not None else None
    rounds: list[RoundRun] = []
    try:
        while True:
            first = warmup_requests + len(rounds) * requests
            results = await send_all(first, requests) if requests else []
            rounds.append(RoundRun(results, _duration(results)))
            # A round where every request failed has no throughput to pin down: stop there.
            dead = bool(results) and not any(r.ok for r in results)
            if dead or repeats.done([r.output_tok_s for r in rounds]) or (
                    stop is not None and stop()):
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


def run_sweep(
    base_url: str, model: str, prompts: Sequence[PromptLike], levels: list[int],
    requests_per_level: int, output_len: int, warmup_requests: int, request_timeout_s: float,
    on_level: Callable[[LevelRun], None] | None = None, stop: Callable[[], bool] | None = None,
    *, api: Api = "completions", rates: list[float] | None = None,
    repeats: Repeats = Repeats(), seed: int = 0, monitor: Monitor | None = None,
) -> list[LevelRun]:
    """Run the levels in order on one connection pool; return what was measured.

    Closed loop: one level per concurrency in `levels`. Open loop (`rates` given): one level per
    rate, each capped at max(levels) in flight, with arrivals seeded from `seed` and the level's
    position. Each level has its own warm-up. `on_level` is called after each level (e.g. to
    store it); `stop()` is checked before each level and between rounds, and True ends the sweep
    early (the server died). Prompts continue across levels, so none repeats while
    len(prompts) >= number of levels * (warmup_requests + requests_per_level * max_rounds).
    """
    if not levels:
        return []
    plan = ([(max(levels), r) for r in rates] if rates is not None
            else [(c, None) for c in levels])
    return asyncio.run(_sweep(base_url, model, prompts, plan, requests_per_level, output_len,
                              warmup_requests, request_timeout_s, on_level, stop, api, repeats,
                              seed, monitor))


async def _sweep(
    base_url: str, model: str, prompts: Sequence[PromptLike],
    plan: list[tuple[int, float | None]], requests_per_level: int, output_len: int,
    warmup_requests: int, request_timeout_s: float,
    on_level: Callable[[LevelRun], None] | None, stop: Callable[[], bool] | None,
    api: Api, repeats: Repeats, seed: int, monitor: Monitor | None,
) -> list[LevelRun]:
    runs: list[LevelRun] = []
    # The pool admits the largest level at once (plus the monitor's scrape); per-level bounds
    # come from the worker count or the open loop's cap.
    connector = aiohttp.TCPConnector(limit=max(c for c, _ in plan) + 1, limit_per_host=0)
    # No session-wide timeout: each request carries its own.
    session_timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=session_timeout) as session:
        offset = 0
        for index, (concurrency, rate) in enumerate(plan):
            if stop is not None and stop():
                break
            rotated = _rotate(prompts, offset)
            run = await run_level(session, base_url, model, rotated, concurrency,
                                  requests_per_level, output_len, request_timeout_s,
                                  warmup_requests, api=api, rate=rate, repeats=repeats,
                                  seed=seed * 1_000_003 + index, monitor=monitor, stop=stop)
            offset += warmup_requests + requests_per_level * len(run.round_runs())
            runs.append(run)
            if on_level is not None:
                on_level(run)
    return runs


def _rotate(prompts: Sequence[PromptLike], offset: int) -> list[PromptLike]:
    k = offset % len(prompts) if prompts else 0
    return list(prompts[k:]) + list(prompts[:k])
