"""How much later a stream's first non-empty text arrives than its first chunk, on the tiny model
served by vLLM's CPU build: the difference between TTFT timed to the first chunk carrying a
choice (tuner, `vllm bench serve`) and to the first chunk with text (guidellm 0.8.1, whose
text-completions handler counts a chunk only when `choices[0].text` is non-empty). Run by hand:

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.first_text_lag [--rounds 3] \
        [--server-cores 1]

Each round sends the loadgen bench's prompts (tuner's corpus windows, reply lengths spread as
there) closed loop at `--concurrency`, reads every stream line by line and notes, per request,
the time of its first choice and of its first non-empty text. It prints, per round and over
all, how many requests had a first choice with empty text, how many had no text at all (guidellm
fails those), and the medians of both TTFTs.

`--smoke`: one round of 16 requests at c=4 against the repository's fake engine
(tuner.testing.fake_engine) started as a trial starts vLLM: the whole path in seconds, but the
fake streams text in every chunk, so its empty-text counts say nothing about vLLM's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from bench.loadgen_vs_vllm_bench import as_sent, shared_prompts
from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.client import completion_body
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port


@dataclasses.dataclass
class FirstChunks:
    ttft_choice_s: float  # first event with a choice, as tuner and vllm bench time it
    ttft_text_s: float | None  # first event whose choice has non-empty text, as guidellm
    # times it; None: no text at all (guidellm counts that request as failed)
    empty_before_text: int  # choice events with empty text before the first text


async def one_request(session: aiohttp.ClientSession, url: str, body: bytes) -> FirstChunks:
    start = time.perf_counter()
    first_choice = first_text = None
    empty = 0
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        r.raise_for_status()
        async for raw in r.content:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            choices = orjson.loads(line[5:]).get("choices") or []
            if not choices:
                continue
            now = time.perf_counter()
            first_choice = first_choice if first_choice is not None else now
            if first_text is None:
                if choices[0].get("text"):
                    first_text = now
                else:
                    empty += 1
    if first_choice is None:
        raise RuntimeError("a stream ended without a choice")
    return FirstChunks(first_choice - start,
                       None if first_text is None else first_text - start, empty)


async def closed_loop(url: str, bodies: list[bytes], concurrency: int) -> list[FirstChunks]:
    """`concurrency` workers, each sending the next body when its last request ends."""
    order = iter(enumerate(bodies))
    got: dict[int, FirstChunks] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
        async def worker() -> None:
            for i, body in order:  # one shared iterator: each body is sent once, in order
                got[i] = await one_request(session, url, body)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return [got[i] for i in range(len(bodies))]


def summary(name: str, results: list[FirstChunks]) -> str:
    """One table row. The text median is over the requests that had text (as guidellm's is
    over its successful ones); the choice median over all, and over those same requests."""
    empty = sum(r.empty_before_text > 0 for r in results)
    texted = [r for r in results if r.ttft_text_s is not None]
    choice = statistics.median(r.ttft_choice_s for r in results) * 1e3
    choice_texted = statistics.median(r.ttft_choice_s for r in texted) * 1e3
    text = statistics.median(r.ttft_text_s for r in texted) * 1e3
    return (f"| {name} | {len(results)} | {empty} ({empty / len(results):.1%}) | "
            f"{len(results) - len(texted)} | {choice:.1f} ms | {choice_texted:.1f} ms | "
            f"{text:.1f} ms | {text / choice:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=128)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--output-spread", type=float, default=0.5)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--server-cores", type=int, default=None,
                   help="hold the server to this many of the first cores, this client to the rest")
    p.add_argument("--smoke", action="store_true",
                   help="seconds: 1 round of 16 requests, on the fake engine")
    a = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    if a.smoke:
        a.concurrency, a.requests, a.warmup, a.output_len, a.rounds = 4, 16, 2, 16, 1
        print(SMOKE_HEADER, flush=True)

    model, _, settings = tiny_vllm(a.model)
    if a.smoke:
        settings = fake_engine(settings, Path(tmp.name) / "fake")
    inv = cpu_inventory()
    server_cpus = client_cpus = None
    if a.server_cores is not None:
        if not 0 < a.server_cores < len(inv.devices):
            sys.exit(f"--server-cores: between 1 and {len(inv.devices) - 1} on this machine")
        server_cpus, client_cpus = inv.devices[:a.server_cores], inv.devices[a.server_cores:]
        inv = dataclasses.replace(inv, devices=server_cpus, per_rank=a.server_cores)
    plan = get_adapter("vllm").launch_plan(
        {"tensor_parallel_size": 1, "max_num_seqs": a.max_num_seqs}, settings,
        host="127.0.0.1", port=free_port(), inventory=inv, devices=list(inv.devices))
    rows, every = [], []
    with tmp:
        server = ServerProcess(plan, Path(tmp.name) / "server", cpus=server_cpus)
        server.start()
        if client_cpus is not None:
            os.sched_setaffinity(0, client_cpus)
        try:
            server.wait_ready(300)
            for r in range(a.rounds):
                prompts = as_sent(shared_prompts("corpus", model, a, r), a.warmup)
                bodies = [completion_body(model, q.text, q.output_len)
                          for q in prompts[:a.warmup + a.requests]]
                results = asyncio.run(closed_loop(f"{plan.base_url}/v1/completions", bodies,
                                                  a.concurrency))[a.warmup:]
                every += results
                rows.append(summary(f"round {r}", results))
                print(rows[-1], flush=True)
        finally:
            server.stop()
    print(f"\nconcurrency {a.concurrency}, {a.input_len} tokens in / {a.output_len} out "
          f"(x {1 - a.output_spread:g}-{1 + a.output_spread:g}), {a.warmup} warm-up left out:")
    print("| round | requests | first choice with empty text | no text at all | "
          "TTFT p50, first choice | same, requests with text | TTFT p50, first text | "
          "text ÷ choice |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows + [summary("all", every)]))


if __name__ == "__main__":
    main()
