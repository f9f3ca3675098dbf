"""Which client reports the TTFT a server really has: tuner's load generator and `vllm bench
serve` against the repository's fake OpenAI server, whose first token leaves `--ttft-ms` after a
request arrives and every next one `--itl-ms` later, at the same load, alternated, in one run.
Run by hand (no vLLM server; `vllm bench` is the CPU build's, from the venv):

    .venv/bin/python -m bench.ttft_truth [--concurrency 8] [--requests 512] [--rounds 3] \
        [--together]

The fake server runs in a process of its own on the server's timetable, so what a client adds
to `--ttft-ms` is its own: the time from its send to the request's arrival, plus the time from
the first chunk's arrival to the moment the client reads it (its event loop's backlog while it
parses the other streams' chunks). The table prints each client's median TTFT over rounds, its
excess over the server's, and the median ITL against `--itl-ms`. With `--together` the two run
at the same time (each with `--concurrency` in flight), so each client's excess is what it adds
while the other shares the machine, as in `loadgen_vs_vllm_bench.py --together`.

`--smoke`: one round of 16 requests at c=4, both clients in turns (seconds, most of them vllm
bench's start): the whole path, too few requests for a verdict.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench.loadgen_vs_vllm_bench import (
    next_guidellm_delay,
    overlap_line,
    shared_prompts,
    together,
    tuner_client,
    vllm_bench_client,
    write_dataset,
)
from bench.tiny_vllm import tiny_vllm
from tuner.testing.fake_openai_server import Script, serve_in_process


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss",
                   help="its tokenizer makes the prompts (no server loads it)")
    p.add_argument("--ttft-ms", type=float, default=10.0)
    p.add_argument("--itl-ms", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=512)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--output-spread", type=float, default=0.0,
                   help="reply lengths drawn from --output-len x (1 - S .. 1 + S), as in "
                        "loadgen_vs_vllm_bench.py (default 0: all --output-len)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--together", action="store_true",
                   help="the clients at once, as loadgen_vs_vllm_bench.py runs them (each with "
                        "--concurrency in flight); default: in turns")
    p.add_argument("--guidellm", default="none",
                   help="with --together, guidellm's executable, to run it as a third client "
                        "(it starts --guidellm-delay s after vllm bench, as in "
                        "loadgen_vs_vllm_bench.py); default: none")
    p.add_argument("--guidellm-delay", type=float, default=5.0)
    p.add_argument("--smoke", action="store_true",
                   help="seconds: 1 round of 16 requests, both clients in turns")
    a = p.parse_args()
    if a.smoke:
        a.concurrency, a.requests, a.warmup, a.output_len, a.rounds = 4, 16, 2, 16, 1
        a.together, a.guidellm = False, "none"
        print("smoke: 1 round of 16 requests: too few for a verdict", flush=True)
    if a.guidellm != "none" and not (a.together and Path(a.guidellm).exists()):
        sys.exit(f"--guidellm: runs only with --together, and {a.guidellm} must exist (see "
                 f"loadgen_vs_vllm_bench.py for its install line)")
    # What loadgen_vs_vllm_bench's clients read from their arguments.
    a.max_num_seqs, a.autogroup_nice, a.keep, a.tuner_ids = 0, None, None, False

    model, _, _ = tiny_vllm(a.model)
    script = Script(ttft_s=a.ttft_ms / 1000, itl_s=a.itl_ms / 1000)
    got: dict[str, list] = {"tuner": [], "vllm bench": []}
    if a.guidellm != "none":
        got["guidellm"] = []
    delay = a.guidellm_delay
    with serve_in_process(script) as (url, _pid), tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            texts = shared_prompts("corpus", model, a, r)  # both clients send the same ones
            dataset = write_dataset(texts, Path(tmp) / f"prompts-{r}.jsonl")
            if a.together:
                figures, windows = together(url, model, a, texts, dataset, str(r), Path(tmp),
                                            None if a.guidellm == "none" else a.guidellm, delay)
                measured = list(figures.items())
                delay = next_guidellm_delay(delay, windows)
                print(f"round {r}: {overlap_line(windows)}")
            else:
                measured = [(who, tuner_client(url, model, a, texts, str(r), Path(tmp),
                                               ids=False)[0] if who == "tuner" else
                             vllm_bench_client(url, model, a, dataset, str(r), Path(tmp)))
                            for who in (["tuner", "vllm bench"][::1 if r % 2 == 0 else -1])]
            for who, f in measured:
                got[who].append(f)
                itl = "—" if f.itl_p50_ms is None else f"{f.itl_p50_ms:5.2f}"
                print(f"round {r} {who:<11} TTFT p50 {f.ttft_p50_ms:6.2f} ms  ITL p50 "
                      f"{itl} ms  {f.output_tok_s:>9,.0f} tok/s", flush=True)
    print(f"\nfake server: TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms; c={a.concurrency}, "
          f"{a.requests} requests a round, {a.rounds} rounds (medians over rounds)")
    print(f"{'client':<12}{'TTFT p50 ms':>12}{'excess ms':>11}{'ITL p50 ms':>12}{'tok/s':>10}")
    for who, figures in got.items():
        ttft = statistics.median(f.ttft_p50_ms for f in figures)
        itl = ("—" if figures[0].itl_p50_ms is None else
               f"{statistics.median(f.itl_p50_ms for f in figures):.2f}")
        tok_s = statistics.median(f.output_tok_s for f in figures)
        print(f"{who:<12}{ttft:>12.2f}{ttft - a.ttft_ms:>11.2f}{itl:>12}{tok_s:>10,.0f}")


if __name__ == "__main__":
    main()
