"""guidellm as a third client for bench/loadgen_vs_vllm_bench.py: one closed-loop run at a fixed
concurrency, read back from its own JSON report.

guidellm pins click and multidict below what vLLM's CPU build installs, so it lives in a venv of
its own (`--guidellm` points at its executable); see the bench's docstring for the install line.

What guidellm measures, from its source (0.8.1): TTFT runs from the request's send to the first
chunk with non-empty text; its "inter-token latency" is per request, (last token - first token)
/ (output tokens - 1), which is what `vllm bench serve` calls TPOT (vLLM's ITL is each gap
between chunks, pooled over requests); output tok/s is its rate over the measured window, after
the warm-up requests and up to the last completion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.figures import Figures
from tuner.measure.client import Prompt


def scenario(base_url: str, model: str, concurrency: int, requests: int, warmup: int,
             dataset: Path, report: Path) -> dict:
    """A guidellm scenario for the bench's load: `concurrency` streams that each send their next
    request when the last one ends, `warmup` requests left out, then `requests` timed ones; the
    prompts are the rows of `dataset` in order (a JSON-lines file with `prompt` and
    `output_tokens_count`: guidellm then sets max_tokens and ignore_eos), greedy, streamed."""
    return {"spec": {
        "backend": {"kind": "openai_http", "target": base_url, "model": model,
                    "request_format": "/v1/completions", "stream": True,
                    "extras": {"body": {"temperature": 0}}},
        "profile": {"kind": "concurrent", "streams": [concurrency],
                    "warmup": {"mode": "requests", "value": warmup}},
        "constraints": [{"kind": "max_requests", "count": warmup + requests}],
        "tokenizer": {"kind": "huggingface_auto", "model": model},
        "data": [{"kind": "json_file", "path": str(dataset)}],
        "outputs": [{"kind": "json", "path": str(report)}],
    }}


def start_guidellm(executable: str, base_url: str, model: str, a, prompts: list[Prompt],
                   tag: str, out_dir: Path) -> tuple[subprocess.Popen, Path]:
    """Start one guidellm run of the bench's load (`a`: its arguments) on `prompts` (text and
    reply length) in the order given (the warm-up first). Returns the process and the path its
    report will have."""
    report = out_dir / f"guidellm-{tag}.json"
    config = out_dir / f"guidellm-{tag}-scenario.json"
    dataset = out_dir / f"guidellm-{tag}-prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p.text, "output_tokens_count": p.output_len})
                               + "\n" for p in prompts))
    config.write_text(json.dumps(scenario(base_url, model, a.concurrency, a.requests, a.warmup,
                                          dataset, report)))
    # One worker process, as the other two clients have: guidellm's default (up to 10) would
    # take the server's cores on a small machine.
    env = {**os.environ, "GUIDELLM__MAX_WORKER_PROCESSES": "1"}
    proc = subprocess.Popen([executable, "run", "-c", str(config), "--disable-console"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return proc, report


def guidellm_result(proc: subprocess.Popen, report: Path) -> tuple[Figures, tuple[float, float]]:
    """Wait for a started guidellm run; its figures and its measured window (begin, end) on the
    perf_counter clock (guidellm keeps Unix time: moved by this moment's offset between the
    two clocks, which every process on the machine shares)."""
    output, _ = proc.communicate(timeout=900)
    if proc.returncode != 0 or not report.exists():
        sys.exit(f"guidellm failed:\n{output[-3000:]}")
    data = json.loads(report.read_text())
    times = data["benchmarks"][0]["scheduler_metrics"]
    offset = time.time() - time.perf_counter()
    return figures_of(data), (times["measure_start_time"] - offset,
                              times["measure_end_time"] - offset)


def run_guidellm(executable: str, base_url: str, model: str, a, prompts: list[Prompt], tag: str,
                 out_dir: Path) -> Figures:
    """One guidellm run of the bench's load on `prompts`, alone on the server, as guidellm
    reports it."""
    return guidellm_result(*start_guidellm(executable, base_url, model, a, prompts, tag,
                                           out_dir))[0]


def figures_of(report: dict) -> Figures:
    """The bench's figures from a guidellm JSON report of one benchmark. guidellm's ITL is a
    per-request mean gap, so it is the TPOT column; it has no per-gap ITL."""
    (bench,) = report["benchmarks"]
    metrics = bench["metrics"]
    errors = bench["scheduler_metrics"]["requests_made"]["errored"]
    if errors:  # tuner and vllm bench stop on any failure, so a server's would show there
        first = (bench["requests"]["errored"] or [{}])[0].get("info", {}).get("error")
        print(f"guidellm: {errors} of its requests failed ({first}); its figures are over the "
              f"rest", flush=True)

    def ok(name: str) -> dict:
        return metrics[name]["successful"]

    return Figures(output_tok_s=ok("output_tokens_per_second")["mean"],
                   ttft_p50_ms=ok("time_to_first_token_ms")["median"],
                   itl_p50_ms=None,
                   tpot_p50_ms=ok("inter_token_latency_ms")["median"],
                   input_tokens=ok("prompt_token_count")["mean"],
                   requests=int(metrics["request_totals"]["successful"]))
