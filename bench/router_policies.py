"""Does routing by prefix pay on multi-turn chat? Two replicas of the tiny model (one core each)
behind vLLM's router, the same multi-turn workload (a shared system prompt, each turn resending
the conversation) sent through the router under each policy, in one run: each policy's
prefix-cache hit rate (prompt tokens found in the replicas' caches, from their own /metrics),
its requests per replica, and TTFT p50/p90 as the load generator saw them. Each policy gets
fresh replicas, so neither inherits the other's caches.

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.router_policies [--requests 96]

`--smoke`: 16 requests per policy on the repository's fake engine (tuner.testing.fake_engine),
which exports no prefix-cache counters: it checks the bench's wiring, not vLLM.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.engine_metrics import read_prefix_cache
from tuner.measure.loadgen import run_sweep
from tuner.measure.prompts import conversations, synthetic_token_prompts
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import Inventory
from tuner.serve.routers import get_router
from tuner.serve.routers.replicas import deployment

POLICIES = ("cache_aware", "round_robin")
TURNS, SYSTEM_LEN, INPUT_LEN, OUTPUT_LEN, CONCURRENCY = 4, 128, 32, 16, 4


def measure(policy: str, settings, vocab: int, requests: int, workdir: Path) -> dict:
    inventory = Inventory(kind="cpu", type="cpu", devices=(0, 1), description="2 cores",
                          host="bench")
    served = deployment(get_adapter("vllm"), get_router("vllm"),
                        {"replicas": 2, "router_policy": policy}, settings, host="127.0.0.1",
                        inventory=inventory, devices=[0, 1], workdir=workdir / policy,
                        ready_timeout_s=300)

    def draw(count: int, length: int, seed: int) -> list[list[int]]:
        return synthetic_token_prompts(count, length, vocab, seed)

    convs = conversations(requests // TURNS + CONCURRENCY + 2, TURNS, INPUT_LEN, OUTPUT_LEN,
                          SYSTEM_LEN, draw)
    try:
        served.start()
        served.wait_ready(300)
        urls = [r.plan.base_url for r in served.replicas]
        before = [read_prefix_cache("vllm", u) for u in urls]
        (run,) = run_sweep(served.plan.base_url, served.plan.model, convs, [CONCURRENCY],
                           requests, OUTPUT_LEN, warmup_requests=0, request_timeout_s=120)
        after = [read_prefix_cache("vllm", u) for u in urls]
    finally:
        served.stop()
    ttfts = sorted(r.ttft_s * 1000 for r in run.results if r.ok)
    deltas = [a - b for a, b in zip(after, before, strict=True)
              if a is not None and b is not None]
    queries, hits = sum(d.queries for d in deltas), sum(d.hits for d in deltas)
    return {"policy": policy, "ok": len(ttfts), "requests": len(run.results),
            "hit": hits / queries if queries else None,
            "share": "/".join(str(d.requests) for d in deltas) if deltas else "-",
            "p50": statistics.median(ttfts), "p90": ttfts[int(0.9 * (len(ttfts) - 1))]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=96, help="requests (turns) per policy")
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--smoke", action="store_true", help="a few requests on the fake engine")
    a = p.parse_args()
    _, vocab, settings = tiny_vllm(a.model)
    settings = dataclasses.replace(settings, prefix_caching=True)
    tmp = tempfile.TemporaryDirectory(prefix="router-policies-")
    requests = a.requests
    if a.smoke:
        print(SMOKE_HEADER)
        settings, requests = fake_engine(settings, Path(tmp.name) / "fake"), 16
    t0 = time.monotonic()
    rows = [measure(policy, settings, vocab, requests, Path(tmp.name)) for policy in POLICIES]
    print(f"2 replicas x 1 core, {TURNS}-turn conversations ({SYSTEM_LEN}-token shared system "
          f"prompt, {INPUT_LEN}-token messages, {OUTPUT_LEN}-token replies), c={CONCURRENCY}, "
          f"{requests} requests per policy")
    print("policy        prefix-cache hits  requests per replica  TTFT p50 ms  TTFT p90 ms  ok")
    for r in rows:
        hit = "-" if r["hit"] is None else f"{r['hit']:.1%}"
        print(f"{r['policy']:<13} {hit:>17}  {r['share']:>20}  {r['p50']:>11.1f}  "
              f"{r['p90']:>11.1f}  {r['ok']}/{r['requests']}")
    print(f"wall {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
