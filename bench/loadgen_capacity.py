"""How fast the load generator can go: run by hand, prints a table.

    .venv/bin/python -m bench.loadgen_capacity

The target: keep up with a B200 node's token rate, taken as 200,000 streamed chunks per second.
The client (`tuner.measure.loadgen.run_sweep`, the product path) streams from the tests' fake
`/v1/completions` server, in a separate process so the two share no event loop. The server sends
vLLM-shaped completion chunks, one per token, then the usage chunk and `[DONE]`, from pre-rendered
bytes, `--chunks-per-write` events per write, so that on a small machine it leaves the CPU to the
client (at 1 it writes every token alone, as a real server's decode steps do).

Per level: `chunks/s` is the product's own throughput figure (tokens completed inside the level's
window over its length; one chunk per token here); `client CPU use` is the client's CPU seconds
per wall second and `client CPU ms / 1k chunks` its cost, both from the level's own record
(`LevelRun.client_cpu_s`, warm-up and the requests cut off at the end included, so the cost is
if anything overstated), and `client ceiling` the chunks one saturated core of client would
sustain. On a machine shared with the server (and with other work), `chunks/s` is bounded by the
CPU the client gets; the ceiling is what it would do with a core of its own.

`--smoke`: one level, c=8, 32 requests of 64 tokens (seconds): far too little load to say
anything of the target.
"""

from __future__ import annotations

import argparse
import os
import time

import psutil

from tuner.measure.loadgen import run_sweep
from tuner.measure.prompts import synthetic_token_prompts
from tuner.testing.fake_openai_server import Script, serve_in_process

TARGET_CHUNKS_S = 200_000


def _measure(url: str, prompts: list[list[int]], concurrency: int, requests: int,
             output_len: int, server: psutil.Process) -> dict:
    server_cpu0, t0 = _cpu(server), time.perf_counter()
    (run,) = run_sweep(url, "fake", prompts, [concurrency], requests_per_level=requests,
                       output_len=output_len, warmup_requests=concurrency,
                       request_timeout_s=120)
    server_util = (_cpu(server) - server_cpu0) / (time.perf_counter() - t0)
    failed = [r for r in run.results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed, e.g. {failed[0].error}")
    (window,) = run.rounds
    # Chunks the client took in over the level: every completed request's, warm-up included
    # (one per token); those cut off at the end are left out, so CPU per chunk errs high.
    chunks = (concurrency + requests) * output_len
    return {"concurrency": concurrency, "requests": requests, "wall": run.client_wall_s,
            "chunks_s": window.output_tok_s, "cpu_ms_1k": 1e6 * run.client_cpu_s / chunks,
            "ceiling": chunks / run.client_cpu_s, "client_util": run.client_cpu_use,
            "server_util": server_util}


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[16, 64, 256])
    # The GPU examples' reply length (examples/gpt-oss-120b.yaml).
    parser.add_argument("--output-len", type=int, default=1024)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--requests-per-concurrency", type=int, default=4)
    parser.add_argument("--min-requests", type=int, default=256)
    # Zero: the server writes as fast as it can and chunks coalesce into large reads. A small gap
    # paces the writes, as a real server's decode steps do: more wake-ups per chunk.
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--chunks-per-write", type=int, default=16)
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: one level, c=8, 32 requests of 64 tokens")
    args = parser.parse_args()
    if args.smoke:
        args.levels, args.output_len, args.min_requests = [8], 64, 32
        print("smoke: one small level, far too little load to judge the target", flush=True)

    script = Script(itl_s=args.itl_ms / 1000, chunks_per_write=args.chunks_per_write)
    with serve_in_process(script) as (url, pid):
        server = psutil.Process(pid)
        requests = [max(args.min_requests, args.requests_per_concurrency * c)
                    for c in args.levels]
        prompts = synthetic_token_prompts(sum(requests) + 2 * sum(args.levels), args.input_len,
                                          32000, seed=0)
        run_sweep(url, "fake", prompts, [8], 16, args.output_len, 0, 60)  # warm both sides up
        rows = [_measure(url, prompts, c, n, args.output_len, server)
                for c, n in zip(args.levels, requests, strict=True)]
    _print(rows, args)


def _print(rows: list[dict], args: argparse.Namespace) -> None:
    pace = f"{args.itl_ms:g} ms between writes" if args.itl_ms else "zero delays"
    print(f"fake server, {pace}, {args.chunks_per_write} chunks per write, {args.output_len} "
          f"tokens per request, one chunk per token, {args.input_len}-token prompts; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print("| concurrency | requests | wall s | chunks/s | client CPU use "
          "| client CPU ms / 1k chunks | client ceiling chunks/CPU-s | server CPU use |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['requests']} | {r['wall']:.2f} "
              f"| {r['chunks_s']:,.0f} | {r['client_util']:.0%} | {r['cpu_ms_1k']:.2f} "
              f"| {r['ceiling']:,.0f} | {r['server_util']:.0%} |")
    best = max(rows, key=lambda r: r["chunks_s"])
    verdict = "reached" if best["chunks_s"] >= TARGET_CHUNKS_S else "NOT reached"
    print(f"target {TARGET_CHUNKS_S:,} chunks/s {verdict}: best {best['chunks_s']:,.0f} chunks/s "
          f"at c={best['concurrency']}, client CPU use {best['client_util']:.0%} "
          f"({best['cpu_ms_1k']:.2f} ms CPU / 1k chunks)")


if __name__ == "__main__":
    main()
