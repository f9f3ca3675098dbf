"""tuner's load generator against `vllm bench serve`, on the same live server. Run by hand:

    .venv/bin/python bench/loadgen_vs_vllm_bench.py [--concurrency 8] [--requests 64] [--rounds 3]

The server is started the way a trial starts it (vLLM adapter + launcher). Each round runs both
clients with the same workload (random token prompts of exact length, fixed output length with
ignore_eos, the same concurrency, warm-up first), alternating which goes first so drift on a
noisy machine does not favour one. Prints each round, the medians, and tuner / vllm-bench ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tiny_vllm import tiny_vllm

from tuner.measure.loadgen import run_sweep
from tuner.measure.metrics import summarize_level
from tuner.measure.prompts import synthetic_token_prompts
from tuner.search.context import resolve_executable
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port
from tuner.spec.sla import SLA


def tuner_client(base_url, model, vocab, a, seed) -> tuple[float, float]:
    prompts = synthetic_token_prompts(a.requests + a.warmup, a.input_len, vocab, seed)
    runs = run_sweep(base_url, model, prompts, [a.concurrency], a.requests, a.output_len,
                     a.warmup, 120)
    m = summarize_level(runs[0], 1, SLA())
    assert m.errors == 0, m.error_sample
    return m.output_tok_s, m.ttft_p50_ms, m.input_tokens / m.requests


def vllm_bench_client(base_url, model, a, seed, out_dir: Path) -> tuple[float, float]:
    result = out_dir / f"bench-{seed}.json"
    cmd = [resolve_executable("vllm"), "bench", "serve", "--backend", "vllm",
           "--base-url", base_url, "--model", model, "--dataset-name", "random",
           "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
           "--random-range-ratio", "0", "--num-prompts", str(a.requests),
           "--max-concurrency", str(a.concurrency), "--num-warmups", str(a.warmup),
           "--ignore-eos", "--temperature", "0", "--seed", str(seed), "--disable-tqdm",
           "--save-result", "--result-dir", str(out_dir), "--result-filename", result.name]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"vllm bench serve failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    data = json.loads(result.read_text())
    assert data.get("failed", 0) == 0, data.get("errors")
    return (data["output_throughput"], data["median_ttft_ms"],
            data["total_input_tokens"] / data["completed"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()

    model, vocab, settings = tiny_vllm(a.model)
    inv = cpu_inventory()
    plan = get_adapter("vllm").launch_plan(
        {"tensor_parallel_size": 1, "max_num_seqs": a.max_num_seqs}, settings,
        host="127.0.0.1", port=free_port(), inventory=inv, devices=list(inv.devices))
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(plan, Path(tmp) / "server")
        server.start()
        try:
            server.wait_ready(300)
            rows = []
            for r in range(a.rounds):
                order = ["tuner", "vllm-bench"] if r % 2 == 0 else ["vllm-bench", "tuner"]
                got = {}
                for who in order:
                    got[who] = (tuner_client(plan.base_url, model, vocab, a, r) if who == "tuner"
                                else vllm_bench_client(plan.base_url, model, a, r, Path(tmp)))
                rows.append(got)
                print(f"round {r}: tuner {got['tuner'][0]:8,.0f} tok/s  TTFT p50 "
                      f"{got['tuner'][1]:7.1f} ms | vllm bench {got['vllm-bench'][0]:8,.0f} "
                      f"tok/s  TTFT p50 {got['vllm-bench'][1]:7.1f} ms  (input tokens per request: "
                      f"{got['tuner'][2]:.0f} vs {got['vllm-bench'][2]:.0f})", flush=True)
        finally:
            server.stop()

    def med(who, i):
        return statistics.median(row[who][i] for row in rows)

    print(f"\nconcurrency {a.concurrency}, {a.requests} requests x {a.input_len} in / "
          f"{a.output_len} out, {a.rounds} rounds, medians:")
    print(f"{'metric':<22}{'tuner':>12}{'vllm bench':>12}{'ratio':>8}{'within 10%':>12}")
    for name, i in (("output tok/s", 0), ("median TTFT (ms)", 1)):
        t, v = med("tuner", i), med("vllm-bench", i)
        agree = "yes" if abs(t / v - 1) <= 0.10 else "no"
        print(f"{name:<22}{t:>12,.1f}{v:>12,.1f}{t / v:>8.3f}{agree:>12}")


if __name__ == "__main__":
    main()
