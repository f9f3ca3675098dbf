"""A scripted stand-in for vLLM's streaming `/v1/completions` and `/v1/chat/completions`, for
tests and the capacity bench.

It streams one chunk per token on a fixed timetable (first token `ttft_s` after the request
arrives, then one every `itl_s`, on absolute deadlines so sleep overshoot does not accumulate),
then the usage chunk and `[DONE]`, as vLLM does with `stream_options.include_usage`. Chat streams
open with the role announcement in the first token's step, as vLLM's do. With `ttft_range` /
`itl_range` each request draws its own TTFT and ITL uniformly from a seeded generator (known
means, real spread). It counts the requests it saw and the most it had in flight, and can fail on
demand. An unstreamed request gets one JSON answer that depends on its prompt only (`answer`),
or a wrong one (`Script.wrong`), as a broken configuration would give.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import random
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web

FAILURES = ("http500", "close_mid_stream", "no_usage", "error_event")


@dataclass
class Script:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens: int | None = None  # chunks to stream; None: the request's max_tokens
    empty_every: int = 0  # every k-th chunk has empty text, as byte-level tokenizers stream
    fail: str | None = None  # one of FAILURES
    split_events: bool = False  # write each event in two pieces, a moment apart
    ttft_range: tuple[float, float] | None = None  # per request: uniform draw, replaces ttft_s
    itl_range: tuple[float, float] | None = None  # per request: uniform draw, replaces itl_s
    seed: int = 0  # of the per-request draws
    # A load model: each request's gap between tokens grows by this for every request in flight
    # when it arrives (itself included), so per-user speed falls as concurrency rises.
    itl_per_in_flight_s: float = 0.0
    # Events per network write: 1 is one write per token, as a server's decode steps send them;
    # more coalesce a run of tokens into one write (each at its own deadline, written at the
    # last one's), which keeps the server's cost per token small in the capacity bench.
    chunks_per_write: int = 1
    # Unstreamed requests (the quality gate's) get a greedy answer that is a function of the
    # prompt; `wrong` answers every prompt differently (a configuration that breaks the model).
    wrong: bool = False


# vLLM's request ids and timestamps, so an event is as long as the real server's.
_ID = "cmpl-" + "0123456789abcdef" * 2
_CREATED = 1764633600


def _chunk(text: str, finish: str | None) -> bytes:
    # The shape vLLM streams, so parsing costs what it costs against the real server.
    event = {
        "id": _ID, "object": "text_completion", "created": _CREATED, "model": "fake",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                     "stop_reason": None}],
        "usage": None,
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _chat_chunk(delta: dict, finish: str | None) -> bytes:
    event = {
        "id": "chat" + _ID, "object": "chat.completion.chunk", "created": _CREATED,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


_TOKEN = _chunk(" tok", None)
_EMPTY = _chunk("", None)
_LAST = _chunk(" end", "length")
_CHAT = {_TOKEN: _chat_chunk({"content": " tok"}, None),
         _EMPTY: _chat_chunk({"content": ""}, None),
         _LAST: _chat_chunk({"content": " end"}, "length")}
_ROLE = _chat_chunk({"role": "assistant", "content": ""}, None)
_DONE = b"data: [DONE]\n\n"
_ERROR = b'data: {"error": {"object": "error", "message": "engine died", "code": 500}}\n\n'


def _usage(prompt_tokens: int, completion_tokens: int) -> bytes:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": prompt_tokens + completion_tokens}
    event = {"id": _ID, "object": "text_completion", "created": _CREATED, "model": "fake",
             "choices": [], "usage": usage}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _prompt_tokens(body: dict) -> int:
    # Token ids count themselves; text (a prompt or chat turns) counts its words.
    if "messages" in body:
        return sum(len(m["content"].split()) for m in body["messages"])
    prompt = body["prompt"]
    return len(prompt) if isinstance(prompt, list) else len(prompt.split())


class FakeOpenAIServer:
    def __init__(self, script: Script | None = None):
        self.script = script or Script()
        self.bodies: list[dict] = []  # every request body received, in arrival order
        self.in_flight = 0
        self.max_in_flight = 0
        self.peers: set[tuple] = set()  # client (host, port) pairs: one per TCP connection
        self.arrivals: list[float] = []  # loop time each request arrived
        self.drawn: list[tuple[float, float]] = []  # (ttft_s, itl_s) each request was given
        self._rng = random.Random(self.script.seed)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/health", self.health)  # as vLLM's: guidellm checks it first
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(asyncio.get_running_loop().time())
        body = await request.json()
        self.bodies.append(body)
        self.peers.add(request.transport.get_extra_info("peername"))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._respond(request, body, self.script)
        except ConnectionResetError:
            # The client went away (a load generator cancels what is in flight when it has
            # measured enough): nothing to answer, and no traceback in the server's log.
            return web.Response(status=499)
        finally:
            self.in_flight -= 1

    def _delays(self, script: Script) -> tuple[float, float]:
        ttft = self._rng.uniform(*script.ttft_range) if script.ttft_range else script.ttft_s
        itl = self._rng.uniform(*script.itl_range) if script.itl_range else script.itl_s
        itl += script.itl_per_in_flight_s * self.in_flight
        self.drawn.append((ttft, itl))
        return ttft, itl

    async def _respond(self, request: web.Request, body: dict, script: Script):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        ttft_s, itl_s = self._delays(script)
        if script.fail == "http500":
            await asyncio.sleep(ttft_s)
            return web.json_response({"error": {"message": "boom"}}, status=500)
        chat = "messages" in body
        if not body.get("stream"):
            await asyncio.sleep(ttft_s + itl_s * self._limit(body, chat))
            return web.json_response(answer(body, chat, self._limit(body, chat), script.wrong))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)  # headers go out at once, as vLLM's do: TTFT is not this
        limit = body.get("max_completion_tokens") if chat else body["max_tokens"]
        n = limit if script.tokens is None else script.tokens
        out: list[bytes] = []  # events not yet written

        async def flush(k: int) -> None:
            # Written at token k's deadline, the last of the events held back.
            await asyncio.sleep(max(0.0, t0 + ttft_s + k * itl_s - loop.time()))
            await self._write(resp, b"".join(out), script)
            out.clear()

        k = 0
        for k in range(n):
            if chat and k == 0:
                out.append(_ROLE)
            if k == n // 2 and script.fail == "close_mid_stream":
                request.transport.close()
                return resp
            if k == n // 2 and script.fail == "error_event":
                out.append(_ERROR)
                break
            empty = script.empty_every and k % script.empty_every == script.empty_every - 1
            event = _LAST if k == n - 1 else _EMPTY if empty else _TOKEN
            out.append(_CHAT[event] if chat else event)
            if len(out) >= script.chunks_per_write:
                await flush(k)
        if script.fail != "no_usage":
            out.append(_usage(_prompt_tokens(body), n))
        out.append(_DONE)
        await flush(k)
        await resp.write_eof()
        return resp

    @staticmethod
    def _limit(body: dict, chat: bool) -> int:
        return body.get("max_completion_tokens") if chat else body["max_tokens"]

    @staticmethod
    async def _write(resp: web.StreamResponse, event: bytes, script: Script) -> None:
        if not script.split_events:
            await resp.write(event)
            return
        half = len(event) // 2
        await resp.write(event[:half])
        await asyncio.sleep(0.002)  # long enough that the client reads the first piece alone
        await resp.write(event[half:])


def answer(body: dict, chat: bool, n: int, wrong: bool = False) -> dict:
    """The greedy answer to an unstreamed request: tokens and log-probabilities drawn from the
    prompt alone (so every correct server gives the same), with the top log-probabilities the
    request asks for, in the completions or chat response shape."""
    prompt = body.get("messages") if chat else body["prompt"]
    seed = zlib.crc32(json.dumps(prompt, sort_keys=True).encode()) + (7 if wrong else 0)
    tokens = [f" w{(seed + 3 * k) % 97}" for k in range(n)]
    logprobs = [-((seed + k) % 5) / 10 for k in range(n)]
    top = [{t: lp, " alt": lp - 1.0} for t, lp in zip(tokens, logprobs, strict=True)]
    asked = body.get("top_logprobs") if chat else body.get("logprobs")
    if chat:
        content = [{"token": t, "logprob": lp, "bytes": None,
                    "top_logprobs": [{"token": k, "logprob": v, "bytes": None}
                                     for k, v in alt.items()]}
                   for t, lp, alt in zip(tokens, logprobs, top, strict=True)]
        choice = {"index": 0, "message": {"role": "assistant", "content": "".join(tokens)},
                  "logprobs": {"content": content} if asked else None, "finish_reason": "length"}
        return {"id": "chat" + _ID, "object": "chat.completion", "created": _CREATED,
                "model": "fake", "choices": [choice]}
    choice = {"index": 0, "text": "".join(tokens), "finish_reason": "length",
              "logprobs": {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": top,
                           "text_offset": []} if asked else None}
    return {"id": _ID, "object": "text_completion", "created": _CREATED, "model": "fake",
            "choices": [choice]}


async def start(server: FakeOpenAIServer, port: int = 0) -> tuple[web.AppRunner, int]:
    """Serve on 127.0.0.1 (`port` 0: any free one) in the running loop; return runner and port."""
    # handler_cancellation: a client that gave up (timeout) ends its handler, so shutdown is quick.
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True,
                           shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, runner.addresses[0][1]


@contextmanager
def serve_in_thread(server: FakeOpenAIServer) -> Iterator[str]:
    """Run the server on its own event loop in a thread, so a client may call asyncio.run."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner, port = asyncio.run_coroutine_threadsafe(start(server), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _serve_forever(script: Script, conn) -> None:
    # A load generator cancels its requests in flight when a level ends: writes to their closed
    # connections fail, which is no news here.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

    async def main() -> None:
        _runner, port = await start(FakeOpenAIServer(script))
        conn.send(port)
        await asyncio.Event().wait()  # until the parent terminates this process

    asyncio.run(main())


@contextmanager
def serve_in_process(script: Script | None = None) -> Iterator[tuple[str, int]]:
    """Run the server in a child process: it shares neither the GIL nor an event loop with the
    client, so its timetable holds while the client works. Yields the base URL and child pid;
    the server's counters stay in the child."""
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(
        target=_serve_forever, args=(script or Script(), child), daemon=True)
    proc.start()
    try:
        if not parent.poll(30):
            raise RuntimeError("fake server process did not start")
        yield f"http://127.0.0.1:{parent.recv()}", proc.pid
    finally:
        proc.terminate()
        proc.join(10)
