"""The one Server-Sent-Events parser that every streaming endpoint goes through.

OpenAI-compatible servers (vLLM, TensorRT-LLM, SGLang) stream `data: {json}` events, one per
chunk, then `data: [DONE]`. Completions put the token text in `choices[0].text`, chat in
`choices[0].delta`; both carry a non-empty `choices` list, so one parser and one set of helpers
serve both (vLLM's benchmark copied its loop per endpoint and the copies drifted).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

DONE = "[DONE]"
# A line this long without a newline is not an OpenAI stream; stop before memory runs away.
MAX_LINE_CHARS = 1 << 20


async def iter_sse_events(chunks: AsyncIterable[bytes]) -> AsyncIterator[dict[str, Any]]:
    """Yield each `data:` event of an SSE byte stream as a JSON object; stop at `data: [DONE]`.

    `chunks` are bytes split anywhere, as they come off the network: pass aiohttp's
    `resp.content.iter_any()` (lines work too). Splitting lines here with `str.split` is several
    times cheaper than aiohttp's Python-level `readline`, and the client shares the CPUs with the
    server it measures. An event ends at a blank line (the SSE rule), so
    several `data:` lines of one event are joined with newlines. Comments (`: ...`) and other
    fields (`event:`, `id:`, `retry:`) are ignored; an unterminated event at end of stream is
    dropped, as the SSE rule says. Data that is not a JSON object, or not UTF-8, raises
    `ValueError`.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()  # a character may straddle two chunks
    pending = ""  # the unfinished last line of the chunks so far
    data: list[str] = []
    async for chunk in chunks:
        lines = (pending + decoder.decode(chunk)).split("\n")
        pending = lines.pop()
        if len(pending) > MAX_LINE_CHARS:
            raise ValueError(f"SSE line longer than {MAX_LINE_CHARS} characters")
        for line in lines:
            if line.endswith("\r"):
                line = line[:-1]
            if line:
                if line.startswith("data:"):
                    data.append(line[6:] if line.startswith(" ", 5) else line[5:])
                continue
            if not data:
                continue
            payload = data[0] if len(data) == 1 else "\n".join(data)
            data.clear()
            if payload == DONE:
                return
            yield _parse(payload)


def _parse(payload: str) -> dict[str, Any]:
    event = json.loads(payload)
    if not isinstance(event, dict):
        raise ValueError(f"SSE data is not a JSON object: {payload[:80]!r}")
    return event


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
