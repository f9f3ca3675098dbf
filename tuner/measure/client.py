"""One streamed request to an OpenAI-compatible server: its body (`/v1/completions` or
`/v1/chat/completions`), its send, and its timing, with `time.perf_counter()`.

The client shares the CPUs with the server it measures and must keep up with a GPU node's token
rate, so the per-chunk path does only what it must: parse the JSON, count the choice, append one
gap; the clock is read once per network read. Requests never raise: a failure is a
`RequestResult(ok=False, error=...)`.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson
from aiohttp.http_exceptions import HttpProcessingError

from tuner.measure.records import RequestResult
from tuner.measure.sse import error_of, has_choice, iter_sse_reads, usage_of

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


# Each streamed chunk becomes three containers (the event, its choices, the choice), so at the
# default first-generation threshold (700) the cyclic collector ran every ~230 chunks, and its
# older generations walked every result stored so far: about a third of the client's CPU at
# 200,000 chunks/s (bench/loadgen_capacity.py). Cycles are still collected, less often.
_GC_THRESHOLD0 = 50_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, int, int] | None = None


@contextmanager
def fewer_collections() -> Iterator[None]:
    """While a sweep streams, run the cyclic garbage collector less often; nested and
    concurrent sweeps (parallel trials are threads of one process) share one setting, restored
    when the last one ends."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(_GC_THRESHOLD0, _gc_saved[0]), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0 and _gc_saved is not None:
                gc.set_threshold(*_gc_saved)


@dataclass(frozen=True)
class Prompt:
    """One request's input as sent: token ids or text (completions), or messages (chat).

    `output_len` overrides the sweep's (a dataset's reply length); None keeps it.
    """

    tokens: list[int] | None = None
    text: str | None = None
    messages: list[dict[str, str]] | None = None
    output_len: int | None = None


@dataclass(frozen=True)
class Conversation:
    """The turns of one conversation, each the whole prompt sent at that turn (the history
    so far and a new user message): sent in order, each once the previous one ended."""

    turns: tuple[list[int] | Prompt, ...]


PromptLike = list[int] | Prompt | Conversation


def completion_body(model: str, prompt: list[int] | str, output_len: int) -> bytes:
    """The request body: exactly `output_len` tokens (ignore_eos), greedy, streamed, usage last."""
    return orjson.dumps({
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    })


def chat_body(model: str, messages: list[dict[str, str]], output_len: int) -> bytes:
    """The chat request body, with the same generation rules as `completion_body`; the server
    renders `messages` with the model's chat template."""
    return orjson.dumps({
        "model": model,
        "messages": messages,
        "max_completion_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    })


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
    """Time one response stream that was sent at `start`, its events arriving one at a time
    (one clock reading each): `measure_reads` with one event per read."""
    async def one_per_read() -> AsyncIterator[list[dict[str, Any]]]:
        async for event in events:
            yield [event]

    return await measure_reads(one_per_read(), start, clock)


async def measure_reads(
    reads: AsyncIterable[list[dict[str, Any]]], start: float, clock: Clock = time.perf_counter
) -> RequestResult:
    """Time one response stream that was sent at `start`, given the events of each network read.

    The clock is read once per read: events that arrived together share its time. TTFT is the
    first event carrying a choice, each ITL the gap between successive choice events (empty-text
    ones included; 0 between two of one read), latency runs to the end of the stream. So, by
    construction, latency - ttft == sum(itl) + (end of stream - last choice event). Tokens come
    from `usage`.
    """
    first = last = None
    itl: list[float] = []
    usage: tuple[int, int] | None = None
    async for events in reads:
        now = clock()
        choices = 0
        for event in events:
            if has_choice(event):
                choices += 1
            if event.get("usage") is not None:
                usage = usage_of(event) or usage
            if "error" in event:
                error = error_of(event)
                if error is not None:
                    return _failure(start, now, f"server error event: {error}")
        if choices:
            if first is None:
                first = now
            else:
                itl.append(now - last)
            itl.extend([0.0] * (choices - 1))
            last = now
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
            async with aclosing(iter_sse_reads(resp.content.iter_any())) as reads:
                result = await measure_reads(reads, start, clock)
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
