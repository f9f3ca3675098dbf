"""Stalled rounds of a server started in a session of its own against one started the way tuner
starts it (a process group of its own inside tuner's session). Run by hand:

    .venv/bin/python -m bench.launch_stalls [--rounds 24] [--requests 48] [--pairs 2]

One tiny-model configuration (max-num-seqs 16, max-num-batched-tokens 512), drained rounds of
`--requests` requests at c=4 and at c=16 from tuner's own load generator, the two ways of starting
the server alternated `--pairs` times (a fresh server each). A round is stalled when one of its
requests took over 300 ms to its first token. With the kernel's scheduler autogroups on, a new
session is a CPU-scheduling group of its own, so the server and the load generator are scheduled
as two groups, not as their threads; the table says whether autogroups were on.

`--smoke`: one pair, 2 rounds of 32 requests, each server the repository's fake engine
(tuner.testing.fake_engine) started both ways through the same adapter and launcher (seconds;
what stalls there is the fake's and the client's, not vLLM's).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.loadgen import run_sweep
from tuner.measure.prompts import synthetic_token_prompts
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port

STALL_S = 0.300
WAYS = {"new session (before)": True, "own group, tuner's session (now)": False}


def autogroups() -> str:
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    except OSError:
        return "unknown"


def rounds_of(base_url: str, model: str, vocab: int, a, seed: int) -> list[float]:
    """The worst TTFT (s) of each drained round, at c=4 and c=16 in turn."""
    worst = []
    for r in range(a.rounds):
        concurrency = (4, 16)[r % 2]
        prompts = synthetic_token_prompts(a.requests + 2, 64, vocab, seed * 1000 + r)
        (run,) = run_sweep(base_url, model, prompts, [concurrency], a.requests, 64, 2, 120)
        ttfts = [x.ttft_s for x in run.results if x.ok and x.ttft_s is not None]
        worst.append(max(ttfts) if ttfts else float("inf"))
    return worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--rounds", type=int, default=24)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--smoke", action="store_true",
                   help="seconds: 1 pair, 2 rounds of 32 requests, on the fake engine")
    a = p.parse_args()
    if a.smoke:
        a.rounds, a.requests, a.pairs = 2, 32, 1
        print(SMOKE_HEADER, flush=True)

    model, vocab, settings = tiny_vllm(a.model)
    inv = cpu_inventory()
    worst: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        if a.smoke:
            settings = fake_engine(settings, Path(tmp) / "fake")
        for pair in range(a.pairs):
            order = list(WAYS) if pair % 2 == 0 else list(reversed(WAYS))
            for way in order:
                plan = get_adapter("vllm").launch_plan(
                    {"tensor_parallel_size": 1, "max_num_seqs": 16, "max_num_batched_tokens": 512},
                    settings, host="127.0.0.1", port=free_port(), inventory=inv,
                    devices=list(inv.devices))
                server = ServerProcess(plan, Path(tmp) / f"{pair}-{WAYS[way]}",
                                       new_session=WAYS[way])
                server.start()
                try:
                    server.wait_ready(300)
                    got = rounds_of(plan.base_url, model, vocab, a, pair)
                finally:
                    server.stop()
                worst[way] += got
                stalled = sum(w > STALL_S for w in got)
                print(f"pair {pair} {way:34} {stalled:3} of {len(got)} rounds stalled, worst "
                      f"{max(got) * 1000:,.0f} ms", flush=True)

    print(f"\nautogroups (/proc/sys/kernel/sched_autogroup_enabled): {autogroups()}; "
          f"{a.requests} requests per round at c=4 and c=16 alternately, 64/64 tokens")
    print(f"{'server started in':36}{'rounds':>8}{'stalled (>300 ms)':>19}{'median worst ms':>17}"
          f"{'worst ms':>10}")
    for way, values in worst.items():
        stalled = sum(w > STALL_S for w in values)
        print(f"{way:36}{len(values):>8}{stalled:>19}{statistics.median(values) * 1000:>17,.0f}"
              f"{max(values) * 1000:>10,.0f}")


if __name__ == "__main__":
    main()
