"""The one Server-Sent-Events parser that every streaming endpoint goes through.

OpenAI-compatible servers (vLLM, TensorRT-LLM, SGLang) stream `data: {json}` events, one per
chunk, then `data: [DONE]`. Completions put the token text in `choices[0].text`, chat in
`choices[0].delta`; both carry a non-empty `choices` list, so one parser and one set of helpers
serve both (vLLM's benchmark copied its loop per endpoint and the copies drifted).

The parser works on each network read as a whole: the client shares the CPUs with the server it
measures and has to keep up with a GPU node's token rate, so the per-event path is one split of
the read's bytes and one `orjson.loads` for all its events, and the events of one read are
handed over together (they arrived together, so they share one arrival time).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

DONE = b"[DONE]"
_LAST_EVENT = b"\n\ndata: " + DONE
# This much without an event end is not an OpenAI stream; stop before memory runs away.
MAX_EVENT_BYTES = 1 << 20


class SSEParser:
    """The bytes of an SSE stream in, the JSON objects of its complete events out.

    `feed` takes bytes split anywhere, as they come off the network, and returns the events the
    bytes completed, in order, stopping at `data: [DONE]` (`done` is then True and later bytes
    are ignored). An event ends at a blank line (the SSE rule), so several `data:` lines of one
    event are joined with newlines; lines end with LF or CRLF. Comments (`: ...`) and other
    fields (`event:`, `id:`, `retry:`) are ignored; an unterminated event at end of stream is
    never returned, as the SSE rule says. Working in bytes, a UTF-8 character split between two
    reads needs no incremental decoder: it is never cut at a newline. Data that is not a JSON
    object, or not UTF-8, raises `ValueError`.
    """

    def __init__(self) -> None:
        self.done = False
        self._pending = b""  # what follows the last complete event

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        if self.done:
            return []
        buf = self._pending + chunk if self._pending else chunk
        if b"\r" in buf:
            # A CR whose LF has not arrived stays at the end and joins it on the next read.
            buf = buf.replace(b"\r\n", b"\n")
        cut = buf.rfind(b"\n\n")
        self._pending = buf[cut + 2:] if cut >= 0 else buf
        if len(self._pending) > MAX_EVENT_BYTES:
            raise ValueError(f"SSE line longer than {MAX_EVENT_BYTES} bytes without an event end")
        if cut < 0:
            return []
        region = buf[:cut]
        # A stream's last read usually ends with [DONE]: cut it off so the fast path takes it.
        if region.endswith(_LAST_EVENT) or region == _LAST_EVENT[2:]:
            events = _single_data_lines(region[:-len(_LAST_EVENT)])
            if events is not None:
                self.done = True
                self._pending = b""
                return events
        else:
            events = _single_data_lines(region)
            if events is not None:
                return events
        payloads = self._payloads(region)
        return parse_events(payloads) if payloads else []

    def _payloads(self, region: bytes) -> list[bytes]:
        """The data of each event in `region` (complete events), line by line; stops at
        [DONE]."""
        payloads: list[bytes] = []
        data: list[bytes] = []
        for line in [*region.split(b"\n"), b""]:  # the region ends at a blank line
            if line:
                if line.startswith(b"data:"):
                    data.append(line[6:] if line.startswith(b" ", 5) else line[5:])
                continue
            if not data:
                continue
            payload = b"\n".join(data)
            data.clear()
            if payload == DONE:
                self.done = True
                self._pending = b""
                break
            payloads.append(payload)
        return payloads


def _single_data_lines(region: bytes) -> list[dict[str, Any]] | None:
    """The common case, every event one `data: {...}` line and no [DONE], as one JSON array:
    a few passes over the read's bytes in C and one parse, no work per event in Python.
    None where the region is anything else (the line-by-line path decides)."""
    if not region:
        return []
    joins = region.count(b"\n\ndata: ")
    if (not region.startswith(b"data: ") or region.count(b"\n") != 2 * joins
            or DONE in region):
        return None
    try:
        events = orjson.loads(b"[" + region[6:].replace(b"\n\ndata: ", b",") + b"]")
    except orjson.JSONDecodeError:
        return None  # the line-by-line path names the bad event
    if len(events) != joins + 1 or not all(type(e) is dict for e in events):
        return None
    return events


async def iter_sse_reads(chunks: AsyncIterable[bytes]) -> AsyncIterator[list[dict[str, Any]]]:
    """For each read of an SSE byte stream that completed events, those events, in order (see
    `SSEParser`); the stream ends at `data: [DONE]`.

    `chunks` are bytes split anywhere, as they come off the network: pass aiohttp's
    `resp.content.iter_any()`, which hands over everything that has arrived since the last read.
    """
    parser = SSEParser()
    async for chunk in chunks:
        events = parser.feed(chunk)
        if events:
            yield events
        if parser.done:
            return


async def iter_sse_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[dict[str, Any]]:
    """The events of `iter_sse_reads`, one at a time."""
    async for events in iter_sse_reads(chunks):
        for event in events:
            yield event


def parse_events(payloads: list[bytes]) -> list[dict[str, Any]]:
    """The JSON object of each payload. Bad JSON or UTF-8 raises orjson's JSONDecodeError, a
    `ValueError`."""
    events = [orjson.loads(p) for p in payloads]
    for payload, event in zip(payloads, events, strict=True):
        if type(event) is not dict:
            raise ValueError(f"SSE data is not a JSON object: {payload[:80]!r}")
    return events


def has_choice(event: dict[str, Any]) -> bool:
    """Whether the event carries a choice: a token chunk, even one with empty text.

    Byte-level tokenizers stream empty-text chunks for partial characters; they are tokens all the
    same, so they count (as in `vllm bench serve`). The final usage-only event has `choices: []`.
    A chat stream opens with a delta that only announces the assistant's role (empty content):
    vLLM sends it together with the first token, so it is no token and counting it would add
    a gap of ~0 ms to every request's inter-token latencies.
    """
    choices = event.get("choices")
    if not choices:
        return False
    first = choices[0]
    delta = first.get("delta") if isinstance(first, dict) else None
    if isinstance(delta, dict) and "role" in delta:
        return any(v for k, v in delta.items() if k != "role")
    return True


def usage_of(event: dict[str, Any]) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) from the event's `usage`; None unless it has both."""
    usage = event.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if prompt is None or completion is None:
        return None
    return int(prompt), int(completion)


def error_of(event: dict[str, Any]) -> str | None:
    """The message of an in-stream error event (vLLM sends `{"error": {...}}` mid-stream)."""
    error = event.get("error")
    if not error:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
