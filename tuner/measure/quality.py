"""The quality gate's measurements: its prompts and a server's greedy answers to them (with the
top log-probabilities where the engine returns them, through the OpenAI API's `logprobs`);
`tuner.measure.quality_compare` compares a trial's answers with the reference's.

The requests are plain (not streamed) JSON: the gate times nothing but
itself, so it needs none of the load generator's per-chunk clock.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tuner.measure.client import PATHS, Conversation, Prompt
from tuner.measure.prompts import sweep_prompts
from tuner.spec.quality_spec import QualitySpec
from tuner.spec.study_spec import WorkloadSpec

_ERROR_TEXT_MAX = 200


@dataclass
class Answer:
    """One greedy answer as the server gave it; `error` when the request failed."""

    prompt: Any  # as sent: token ids, text, or the last message's text
    text: str = ""
    tokens: list[str] | None = None  # the generated tokens, where the engine returned logprobs
    logprobs: list[float] | None = None  # of each generated token
    top_logprobs: list[dict[str, float]] | None = None  # per position: token -> logprob
    error: str | None = None

    def units(self) -> list[str]:
        """What answers are compared by: tokens where known, else characters."""
        return self.tokens if self.tokens is not None else list(self.text)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Answer:
        return cls(**d)


def quality_prompts(w: WorkloadSpec, q: QualitySpec, model_dir: Path,
                    vocab_size: int) -> list[list[int] | Prompt]:
    """The gate's prompts: `q.prompts` of the workload's own prompt source, cut to
    `q.input_len` tokens (a prompt file keeps its own) and drawn with the gate's seed, so a
    study's reference and every trial ask exactly the same. Of a conversation workload, each
    conversation's last turn: its whole history, shared system prompt included, where prefix
    caching and routing by prefix would change an answer if anything did."""
    gate = w.model_copy(update={
        "input_len": w.input_len if w.prompt_source == "file" else q.input_len,
        "output_len": q.max_tokens, "range_ratio": 0.0, "output_len_from": "spec",
        "seed": q.seed})
    if w.conversation is None:
        return sweep_prompts(gate, model_dir, vocab_size, q.prompts)
    # Drawn for as many requests as q.prompts whole conversations make, so at least that many.
    drawn = sweep_prompts(gate, model_dir, vocab_size, q.prompts * w.conversation.turns)
    return [c.turns[-1] for c in drawn[:q.prompts] if isinstance(c, Conversation)]


def request(api: str, model: str, prompt: list[int] | Prompt, q: QualitySpec) -> dict[str, Any]:
    """One greedy, seeded, unstreamed request for `prompt`, asking the top log-probabilities."""
    p = prompt if isinstance(prompt, Prompt) else Prompt(tokens=prompt)
    body: dict[str, Any] = {"model": model, "temperature": 0, "seed": q.seed, "stream": False}
    if api == "chat":
        body["messages"] = p.messages or [{"role": "user", "content": p.text or ""}]
        body["max_completion_tokens"] = q.max_tokens
        if q.top_logprobs:
            body.update(logprobs=True, top_logprobs=q.top_logprobs)
    else:
        body["prompt"] = p.tokens if p.tokens is not None else p.text
        body["max_tokens"] = q.max_tokens
        if q.top_logprobs:
            body["logprobs"] = q.top_logprobs
    return body


def _shown(prompt: list[int] | Prompt) -> Any:
    if not isinstance(prompt, Prompt):
        return prompt
    if prompt.messages:
        return prompt.messages[-1].get("content", "")
    return prompt.text if prompt.text is not None else prompt.tokens


def parse_answer(api: str, prompt: Any, response: dict[str, Any]) -> Answer:
    """An OpenAI completions or chat response as an Answer (its logprobs where present)."""
    choice = response["choices"][0]
    logprobs = choice.get("logprobs") or None
    if api == "chat":
        text = (choice.get("message") or {}).get("content") or ""
        content = (logprobs or {}).get("content")
        if not content:
            return Answer(prompt, text)
        return Answer(prompt, text, [c["token"] for c in content],
                      [c["logprob"] for c in content],
                      [{t["token"]: t["logprob"] for t in c.get("top_logprobs") or []}
                       for c in content])
    text = choice.get("text") or ""
    if not logprobs or logprobs.get("tokens") is None:
        return Answer(prompt, text)
    return Answer(prompt, text, list(logprobs["tokens"]), list(logprobs["token_logprobs"]),
                  [dict(t or {}) for t in logprobs.get("top_logprobs") or []])


async def _ask_all(base_url: str, api: str, bodies: list[dict[str, Any]], shown: list[Any],
                   concurrency: int, timeout_s: float) -> list[Answer]:
    url = base_url + PATHS[api]
    gate = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def one(session: aiohttp.ClientSession, body: dict[str, Any], prompt: Any) -> Answer:
        async with gate:
            try:
                async with session.post(url, json=body, timeout=timeout) as resp:
                    if resp.status != 200:
                        text = (await resp.text(errors="replace")).strip()
                        return Answer(prompt, error=f"HTTP {resp.status}: {text}"[:_ERROR_TEXT_MAX])
                    return parse_answer(api, prompt, await resp.json(content_type=None))
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError, KeyError,
                    IndexError, TypeError) as e:
                return Answer(prompt, error=f"{type(e).__name__}: {e}"[:_ERROR_TEXT_MAX])

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        return list(await asyncio.gather(*(one(session, b, p) for b, p in zip(bodies, shown,
                                                                               strict=True))))


def answer_all(base_url: str, api: str, model: str, prompts: list[list[int] | Prompt],
               q: QualitySpec, timeout_s: float) -> tuple[list[Answer], float]:
    """The server's answers to every prompt, in order, `q.concurrency` at a time, and the
    seconds they took. A failed request is an Answer with its `error`, never an exception."""
    bodies = [request(api, model, p, q) for p in prompts]
    t0 = time.perf_counter()
    answers = asyncio.run(_ask_all(base_url, api, bodies, [_shown(p) for p in prompts],
                                   q.concurrency, timeout_s))
    return answers, time.perf_counter() - t0
