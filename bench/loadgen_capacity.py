"""How fast the load generator can go: run by hand, prints a table.

    .venv/bin/python bench/loadgen_capacity.py

The client (`tuner.measure.loadgen.run_sweep`, the product path) streams from the tests' fake
`/v1/completions` server with zero delays, the server in a separate process so the two do not
share an event loop. At each concurrency it reports the chunks and tokens per second sustained and
the client's own CPU time per 1000 chunks. The server here is plain Python too, so at zero delay it
is usually the side that saturates; `client CPU ms / 1k chunks` is the client's real cost, and
`client ceiling` (chunks per CPU-second) what one core of client could do. The real vLLM server on
this box streams about 3-9k tok/s, so the client is not the bottleneck while the ceiling is well
above that.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_openai_server import Script, serve_in_process  # noqa: E402

from tuner.measure.loadgen import run_sweep  # noqa: E402
from tuner.measure.prompts import synthetic_token_prompts  # noqa: E402


def _measure(url: str, prompts: list[list[int]], concurrency: int, requests: int,
             output_len: int, server: psutil.Process) -> dict:
    cpu0, server_cpu0, t0 = time.process_time(), _cpu(server), time.perf_counter()
    runs = run_sweep(url, "fake", prompts, [concurrency], requests_per_level=requests,
                     output_len=output_len, warmup_requests=0, request_timeout_s=120)
    wall = time.perf_counter() - t0
    cpu, server_cpu = time.process_time() - cpu0, _cpu(server) - server_cpu0
    results = runs[0].results
    failed = [r for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed, e.g. {failed[0].error}")
    chunks = sum(len(r.itl_s) + 1 for r in results)
    tokens = sum(r.output_tokens for r in results)
    return {"concurrency": concurrency, "requests": requests, "chunks": chunks, "wall": wall,
            "chunks_s": chunks / wall, "tok_s": tokens / wall, "cpu_ms_1k": 1e6 * cpu / chunks,
            "ceiling": chunks / cpu, "client_util": cpu / wall, "server_util": server_cpu / wall}


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--min-requests", type=int, default=40)
    # Zero: the server writes as fast as it can and chunks coalesce into large reads. A small gap
    # paces one chunk per read, as a real server's decode steps do: more wake-ups per chunk.
    parser.add_argument("--itl-ms", type=float, default=0.0)
    args = parser.parse_args()

    with serve_in_process(Script(itl_s=args.itl_ms / 1000)) as (url, pid):
        server = psutil.Process(pid)
        requests = [max(args.min_requests, 4 * c) for c in args.levels]
        prompts = synthetic_token_prompts(max(requests), args.input_len, 32000, seed=0)
        run_sweep(url, "fake", prompts, [8], 16, args.output_len, 0, 60)  # warm both sides up
        rows = [_measure(url, prompts, c, n, args.output_len, server)
                for c, n in zip(args.levels, requests, strict=True)]
    _print(rows, args)


def _print(rows: list[dict], args: argparse.Namespace) -> None:
    pace = f"{args.itl_ms:g} ms between chunks" if args.itl_ms else "zero delays"
    print(f"fake server, {pace}, {args.output_len} tokens per request, one chunk per token, "
          f"{args.input_len}-token prompts; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| concurrency | requests | chunks | wall s | chunks/s | tok/s "
          "| client CPU ms / 1k chunks | client ceiling chunks/CPU-s | client CPU use "
          "| server CPU use |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['requests']} | {r['chunks']} | {r['wall']:.2f} "
              f"| {r['chunks_s']:,.0f} | {r['tok_s']:,.0f} | {r['cpu_ms_1k']:.1f} "
              f"| {r['ceiling']:,.0f} | {r['client_util']:.0%} | {r['server_util']:.0%} |")


if __name__ == "__main__":
    main()
