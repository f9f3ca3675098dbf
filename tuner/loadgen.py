"""Streaming load generator for OpenAI-compatible `/v1/completions`: a sweep of fixed-concurrency
levels, each request timed with `time.perf_counter()`.

The client shares the CPUs with the server it measures, so the per-chunk path does only what it
must: parse the JSON, read the clock, append one gap. Requests never raise: a failure is a
`RequestResult(ok=False, error=...)`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterable, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from tuner.records import RequestResult
from tuner.sse import error_of, has_choice, iter_sse_events, usage_of

Clock = Callable[[], float]

COMPLETIONS_PATH = "/v1/completions"
_HEADERS = {"Content-Type": "application/json"}
# What a request can fail with on the wire (ValueError: bad JSON, UTF-8 or SSE; HttpProcessingError:
# a malformed HTTP response); anything else is a bug and should surface.
_REQUEST_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError,
                   HttpProcessingError)
_ERROR_TEXT_MAX = 200


@dataclass
class LevelRun:
    """The timed requests of one concurrency level, as measured; `metrics` turns it into a row."""

    concurrency: int
    results: list[RequestResult]  # timed requests only, in completion order
    duration_s: float  # first send to last completion of timed requests


def completion_body(model: str, prompt: list[int], output_len: int) -> bytes:
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


def _bodies(model: str, prompts: list[list[int]], first: int, count: int,
            output_len: int) -> Iterator[bytes]:
    # Built lazily, just before each send, so memory stays flat whatever the request count.
    n = len(prompts)
    for i in range(first, first + count):
        yield completion_body(model, prompts[i % n], output_len)


async def run_level(
    session: aiohttp.ClientSession, base_url: str, model: str, prompts: list[list[int]],
    concurrency: int, requests: int, output_len: int, request_timeout_s: float,
    warmup_requests: int = 0,
) -> LevelRun:
    """Send `requests` timed requests at `concurrency` in flight, after `warmup_requests` untimed.

    Prompts are taken in order and cycled: warm-up takes the first ones, timed requests the next,
    so no prompt repeats (and hits the prefix cache) while len(prompts) >= warm-up + requests.
    """
    if concurrency < 1 or requests < 0 or warmup_requests < 0:
        raise ValueError(f"need concurrency >= 1, requests and warm-up >= 0: "
                         f"{concurrency}, {requests}, {warmup_requests}")
    if not prompts:
        raise ValueError("no prompts")
    url = base_url.rstrip("/") + COMPLETIONS_PATH
    timeout = aiohttp.ClientTimeout(total=request_timeout_s)
    if warmup_requests > 0:
        warm = _bodies(model, prompts, 0, warmup_requests, output_len)
        await _run_fixed_concurrency(session, url, warm, min(concurrency, warmup_requests), timeout)
    timed = _bodies(model, prompts, warmup_requests, requests, output_len)
    results = await _run_fixed_concurrency(session, url, timed, min(concurrency, requests), timeout)
    return LevelRun(concurrency=concurrency, results=results, duration_s=_duration(results))


def _duration(results: list[RequestResult]) -> float:
    if not results:
        return 0.0
    first_send = min(r.start for r in results)
    last_end = max(r.end for r in results if r.end is not None)
    return last_end - first_send


def run_sweep(
    base_url: str, model: str, prompts: list[list[int]], levels: list[int],
    requests_per_level: int, output_len: int, warmup_requests: int, request_timeout_s: float,
    on_level: Callable[[LevelRun], None] | None = None, stop: Callable[[], bool] | None = None,
) -> list[LevelRun]:
    """Run the levels in order on one connection pool; return what was measured.

    Each level has its own warm-up. `on_level` is called after each level (e.g. to store it);
    `stop()` is checked before each level, and True ends the sweep early (the server died).
    Prompts continue across levels, so none repeats while
    len(prompts) >= len(levels) * (warmup_requests + requests_per_level).
    """
    if not levels:
        return []
    return asyncio.run(_sweep(base_url, model, prompts, levels, requests_per_level, output_len,
                              warmup_requests, request_timeout_s, on_level, stop))


async def _sweep(
    base_url: str, model: str, prompts: list[list[int]], levels: list[int],
    requests_per_level: int, output_len: int, warmup_requests: int, request_timeout_s: float,
    on_level: Callable[[LevelRun], None] | None, stop: Callable[[], bool] | None,
) -> list[LevelRun]:
    runs: list[LevelRun] = []
    # The pool admits the largest level at once; per-level bounds come from the worker count.
    connector = aiohttp.TCPConnector(limit=max(levels), limit_per_host=0)
    # No session-wide timeout: each request carries its own.
    session_timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=session_timeout) as session:
        offset = 0
        for concurrency in levels:
            if stop is not None and stop():
                break
            rotated = _rotate(prompts, offset)
            run = await run_level(session, base_url, model, rotated, concurrency,
                                  requests_per_level, output_len, request_timeout_s,
                                  warmup_requests)
            offset += warmup_requests + requests_per_level
            runs.append(run)
            if on_level is not None:
                on_level(run)
    return runs


def _rotate(prompts: list[list[int]], offset: int) -> list[list[int]]:
    k = offset % len(prompts) if prompts else 0
    return prompts[k:] + prompts[:k]
