"""Why the rounds of one level vary: the same server, the same level, rounds of new prompts
against rounds that replay one set of prompts, alternated, in one run. Run by hand (it starts
vLLM):

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.round_spread \
        [--speculative ngram|none] [--concurrency 16] [--requests 96] [--rounds 8] [--runs 2]

A trial's rounds each take the next `--requests` prompts of the corpus, so with speculative
decoding every round drafts over different text; if the draft acceptance of a round's text sets
its throughput, rounds that replay the same prompts vary much less than rounds of new ones,
while without speculation the two vary alike. The server is started the way a trial starts it
(vLLM adapter + launcher; prefix caching off, so a replayed prompt is computed again). Each
run is one level of `--rounds` rounds (none stops early); the table prints, per kind of
prompts, each run's round-to-round spread of output tok/s (sd/mean) and its draft acceptance.

`--smoke`: one run of each kind, 2 rounds of 8 requests at c=4, on the repository's fake engine
(tuner.testing.fake_engine) started as a trial starts vLLM (seconds). The fake does not speculate
and publishes no metrics: its draft acceptance prints as nan, its spreads are its timetable's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.client import Prompt
from tuner.measure.engine_metrics import read_spec_decode
from tuner.measure.loadgen import Repeats, run_sweep
from tuner.measure.prompts import as_text, corpus_token_prompts
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port


def prompts(model: str, a, seed: int, replay: bool) -> list:
    """Enough prompts for the level (warm-up, every round, and what the closed loop sends past
    its last window): new ones throughout, or one round's worth repeated."""
    n = a.warmup + a.requests * a.rounds + a.concurrency
    tokenizer = Path(model) / "tokenizer.json"
    windows = corpus_token_prompts(a.requests if replay else n, a.input_len, tokenizer, seed)
    texts = as_text([Prompt(tokens=w) for w in windows], tokenizer)
    return [texts[i % len(texts)] for i in range(n)]


def measure(base_url: str, model: str, a, seed: int, replay: bool) -> tuple[float, float, float]:
    """(mean output tok/s, its sd/mean over rounds, draft acceptance) of one level."""
    before = read_spec_decode("vllm", base_url)
    run, = run_sweep(base_url, model, prompts(model, a, seed, replay), [a.concurrency],
                     a.requests, a.output_len, a.warmup, 120,
                     repeats=Repeats(max_rounds=a.rounds, ci_target=1e-9))
    after = read_spec_decode("vllm", base_url)
    if any(not r.ok for r in run.results):
        sys.exit(f"requests failed: {next(r.error for r in run.results if not r.ok)}")
    rates = [rnd.output_tok_s for rnd in run.round_runs()]
    mean = statistics.fmean(rates)
    accepted = float("nan")
    if before is not None and after is not None and (after - before).draft_tokens:
        d = after - before
        accepted = d.accepted_tokens / d.draft_tokens
    return mean, statistics.stdev(rates) / mean, accepted


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--speculative", choices=["ngram", "none"], default="ngram")
    p.add_argument("--draft", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests", type=int, default=96)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--runs", type=int, default=2, help="levels of each kind, alternated")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--smoke", action="store_true",
                   help="seconds: 1 run of each kind, 2 short rounds, on the fake engine")
    a = p.parse_args()
    tmp = tempfile.TemporaryDirectory()
    if a.smoke:
        a.concurrency, a.requests, a.rounds, a.runs, a.warmup, a.output_len = 4, 8, 2, 1, 2, 16
        print(SMOKE_HEADER, flush=True)

    model, _, settings = tiny_vllm(a.model)
    if a.smoke:
        settings = fake_engine(settings, Path(tmp.name) / "fake")
    params = {"tensor_parallel_size": 1, "max_batch_size": 16, "max_num_tokens": 512}
    if a.speculative == "ngram":
        params |= {"speculative_method": "ngram", "num_speculative_tokens": a.draft}
    inv = cpu_inventory()
    plan = get_adapter("vllm").launch_plan(params, settings, host="127.0.0.1", port=free_port(),
                                           inventory=inv, devices=list(inv.devices))
    rows: dict[str, list[tuple[float, float, float]]] = {"new prompts": [], "replayed": []}
    with tmp:
        server = ServerProcess(plan, Path(tmp.name) / "server")
        server.start()
        try:
            server.wait_ready(300)
            for run in range(a.runs):
                for kind in (rows if run % 2 == 0 else reversed(list(rows))):
                    got = measure(plan.base_url, model, a, run, kind == "replayed")
                    rows[kind].append(got)
                    print(f"run {run} {kind:<12} {got[0]:>8,.0f} tok/s  spread {got[1]:.1%}  "
                          f"drafts accepted {got[2]:.0%}", flush=True)
        finally:
            server.stop()
    print(f"\nspeculative {a.speculative}, c={a.concurrency}, rounds of {a.requests} requests "
          f"({a.input_len} in / {a.output_len} out), {a.rounds} rounds a level:")
    print(f"{'prompts':<12} {'spread per run (sd/mean)':>26} {'tok/s per run':>22} "
          f"{'accepted':>10}")
    for kind, got in rows.items():
        print(f"{kind:<12} {', '.join(f'{g[1]:.1%}' for g in got):>26} "
              f"{', '.join(f'{g[0]:,.0f}' for g in got):>22} "
              f"{', '.join(f'{g[2]:.0%}' for g in got):>10}")
    new = statistics.median(g[1] for g in rows["new prompts"])
    same = statistics.median(g[1] for g in rows["replayed"])
    print(f"\nratio of the median spread, new prompts over replayed: {new / same:.2f}")


if __name__ == "__main__":
    main()
