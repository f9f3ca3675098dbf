"""tuner's load generator against `vllm bench serve` and guidellm, on the same live server, in one
run. Run by hand (it starts vLLM):

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.loadgen_vs_vllm_bench \
        [--concurrency 8] [--requests 256] [--rounds 9] [--guidellm PATH | --guidellm none] \
        [--server-cores N] [--prompts corpus random] [--no-together] [--output-spread 0.5]

guidellm pins click and multidict below what vLLM's CPU build needs, so it gets a venv of its own
(the default `--guidellm` is its executable there; the CPU wheel of torch keeps it small):

    python3 -m venv .tuner/guidellm && .tuner/guidellm/bin/pip install guidellm==0.8.1 \
        torch==2.13.0   # + --extra-index-url https://download.pytorch.org/whl/cpu off this machine

The server is started the way a trial starts it (vLLM adapter + launcher; prefix caching off, as
the command line now really says). Each round runs every client with the same load: the same
prompts in the same order, `--input-len` tokens each, for the server to tokenize (one file
per round: tuner's corpus windows decoded, or vLLM's random dataset made by vllm's own code;
vllm bench reads it as its custom dataset, guidellm as a JSON-lines dataset), each with its
reply length (ignore_eos), greedy, streamed, `--concurrency` requests in flight
(each client sends the next one when one ends), `--warmup` requests first and left out (the
first prompt again and again, as vllm bench warms up), then `--requests` timed ones; with
several `--prompts` every client runs on each set and is compared with vllm bench on the same
set. The texts are shared because the server's speed depends on them: with prefix caching on,
vLLM's random dataset on this 512-token vocabulary repeats prompts (its runs of consecutive ids
have ~500 starts), which a cache serves without prefill.

Reply lengths are drawn uniformly from `--output-len` x (1 - S .. 1 + S), S = `--output-spread`
(0.5 by default; the same draw for every client). With one length for all (`--output-spread 0`),
requests that start together finish in the same decode step and start again together, so a
client's requests move in groups for the whole run, each request's prefill queued behind its
group's: vllm bench's 8 start at once after its drained warm-up and stayed one group of 8, while
tuner's continuous workers had drifted apart, and the median TTFTs then differed by 25-30% on
one server at one time for that reason alone. Spread lengths break the groups up.

Each other client runs at the same time as a vllm bench run of its own (`--no-together`: all
in turns, in an order that rotates each round): each round runs vllm bench with tuner, then
vllm bench with guidellm, on the same prompts, each keeping `--concurrency` in flight (the
server holds twice that), and each client is compared with the vllm bench run beside it (the
row `vllm bench beside guidellm`). In pairs rather than all three at once: the clients share
the cores left to them, and a third client's CPU use slows vllm bench's reading of its streams
more than tuner's (vllm bench uses about 3.5x tuner's CPU per request here), which moved
tuner's TTFT ratio by ~3-6% on a 14 ms TTFT. tuner starts its warm-up when vllm bench starts
its own, so their timed windows open together; guidellm reaches its first request sooner, so
it starts `--guidellm-delay` s after vllm bench, and each next round moves that delay by half
of how far guidellm's window opened from vllm bench's (a whole step overshoots: guidellm
starts more slowly once the others' load runs).
Each window closes at its client's own `--requests`-th completion; each round prints how much
of vllm bench's window the other client's covered and how far apart they opened (all on
perf_counter, one clock per machine). Taking turns, each client meets the machine at other
seconds: on a shared 2-core VM the server's tokens per CPU-second move 10-40% between turns with
its core busy all the time (a loop in the core's caches holds within 2% there, a copy through
DRAM moves about 10%), and no affordable number of rounds narrows that to a 5% verdict.
Measured together, the two clients share every batch, so what differs is the clients alone.
The defaults (256 timed requests, 9 rounds) are sized for that verdict: a round's median TTFT
over 128 requests put its ratio anywhere in 0.93-1.09 (9 rounds), over 256 in 0.98-1.04.
`tuner ids` runs only in turns.

The server is held to the first `--server-cores` cores (half of them by default) and the
clients to the rest, so a client's own CPU use does not slow the server it measures, and a busy
server does not delay a client's reading of its streams: on 2 shared cores with no such split
(`--server-cores 0`), vllm bench's heavier client read first chunks later than tuner's (tuner's
median TTFT 0.90 of vllm bench's, 11.6 against 13.0 ms) where with the split they agreed within
1%. Prints each
round, then one table: the medians over rounds and each figure's ratio to vllm bench's (the
median of the per-round ratios, and their range), then a verdict on output tok/s and median TTFT:
within 5% only when the 95% bootstrap interval of the median ratio lies inside 0.95-1.05, not
within when it lies outside, and undecided when the rounds vary too much to tell.

What each figure means, per client (from their source):
- output tok/s: vllm bench, output tokens over the time from its first send to its last
  completion (the warm-up drained before); tuner, tokens completed in a window of `--requests`
  completions that starts where the warm-up ends, with no drain; guidellm, its rate over the
  window from the end of the warm-up to the last completion.
- TTFT: send to the first chunk with a choice (vllm bench, tuner); guidellm waits for the first
  chunk with non-empty text. tuner's sample is the requests that started and ended in its window.
- ITL: each gap between successive choice chunks, pooled over requests, first token excluded;
  the same in vllm bench and tuner (empty-text chunks count in both). guidellm has no such figure.
- TPOT: each request's mean gap after its first token: vllm bench (last chunk - first) /
  (tokens - 1); tuner (end of stream - first) / (tokens - 1), so it also holds the usage chunk;
  guidellm calls this its ITL and weights each request by its tokens - 1 (equal here).

`--smoke`: one round of 16 requests at c=4, tuner and the real `vllm bench serve` together,
against the repository's fake engine (tuner.testing.fake_engine) started as a trial starts vLLM; no
guidellm (a venv of its own). The whole path in seconds; the figures are the fake's timetable.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from bench.figures import REFERENCE, Figures, beside, round_line, table, verdicts
from bench.guidellm_client import guidellm_result, run_guidellm, start_guidellm
from bench.tiny_vllm import SMOKE_HEADER, fake_engine, tiny_vllm
from tuner.measure.client import Prompt
from tuner.measure.loadgen import run_sweep
from tuner.measure.metrics import summarize_level
from tuner.measure.prompts import as_text, corpus_token_prompts
from tuner.search.context import resolve_executable
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port
from tuner.spec.sla import SLA

PROMPT_SETS = ("corpus", "random")
GUIDELLM_DEFAULT = ".tuner/guidellm/bin/guidellm"


def shared_prompts(kind: str, model: str, a, seed: int) -> list[Prompt]:
    """One round's prompts, sent by every client in the same order: `requests` timed ones,
    then `concurrency` more (the closed loop sends up to that many past its window), none
    repeated, each of `input_len` tokens of the model's tokenizer. `corpus`: tuner's corpus
    windows decoded (a trial's text workload). `random`: vLLM's own random dataset (runs of
    consecutive token ids decoded, re-encoded and cut), made by vllm's code with this seed.
    Each asks for its own reply length (`output_lengths`)."""
    n = a.requests + a.concurrency
    if kind == "corpus":
        tokenizer = Path(model) / "tokenizer.json"
        windows = corpus_token_prompts(n, a.input_len, tokenizer, seed)
        texts = [p.text for p in as_text([Prompt(tokens=w) for w in windows], tokenizer)]
    else:
        from vllm.benchmarks.datasets.datasets import RandomDataset
        from vllm.tokenizers import get_tokenizer

        texts = [s.prompt for s in RandomDataset(random_seed=seed).sample(
            tokenizer=get_tokenizer(model), num_requests=n, input_len=a.input_len,
            output_len=a.output_len, range_ratio=0.0)]
    return [Prompt(text=t, output_len=m)
            for t, m in zip(texts, output_lengths(a, n, seed), strict=True)]


def output_lengths(a, n: int, seed: int) -> list[int]:
    """`n` reply lengths: `output_len` each, or with `output_spread` s > 0 drawn uniformly from
    output_len x (1 - s .. 1 + s). Equal lengths keep requests that start together in step to
    the end (they finish in the same step and start again together), so a client's TTFT then
    depends on how its start happened to group them; spread lengths break the groups up."""
    low = max(1, round(a.output_len * (1 - a.output_spread)))
    high = round(a.output_len * (1 + a.output_spread))
    return [int(m) for m in np.random.default_rng(seed).integers(low, high, n, endpoint=True)]


def write_dataset(prompts: list[Prompt], path: Path) -> Path:
    """The prompts as `vllm bench serve`'s custom dataset: one JSON line each, with its reply
    length (`--custom-output-len -1` makes vllm bench read it)."""
    path.write_text("".join(json.dumps({"prompt": p.text, "output_tokens": p.output_len}) + "\n"
                            for p in prompts))
    return path


def as_sent(prompts: list[Prompt], warmup: int) -> list[Prompt]:
    """The prompts in the order a client sends them: vllm bench warms up by sending its first
    prompt `warmup` times and then sends every prompt from the first; the others do the same."""
    return [prompts[0]] * warmup + prompts


def tuner_client(base_url, model, a, shared: list[Prompt], tag: str, out_dir: Path,
                 ids: bool) -> tuple[Figures, tuple[float, float]]:
    """tuner's load generator on the shared prompts; `ids` sends them tokenized (token ids, as a
    trial's synthetic prompts are), which skips the server's tokenizer. Returns its figures and
    its window (perf_counter begin, end)."""
    prompts = as_sent(shared, a.warmup)
    if ids:
        from tokenizers import Tokenizer

        encode = Tokenizer.from_file(str(Path(model) / "tokenizer.json")).encode
        prompts = [Prompt(tokens=encode(p.text, add_special_tokens=False).ids,
                          output_len=p.output_len) for p in prompts]
    runs = run_sweep(base_url, model, prompts, [a.concurrency], a.requests, a.output_len,
                     a.warmup, 120)
    (out_dir / f"tuner-{'ids' if ids else 'text'}-{tag}.json").write_text(json.dumps(
        [dataclasses.asdict(r) for r in runs[0].results]))
    m = summarize_level(runs[0], 1, SLA())
    if m.errors:
        sys.exit(f"tuner: {m.errors} requests failed: {m.error_sample}")
    return (Figures(m.output_tok_s, m.ttft_p50_ms, m.itl_p50_ms, m.tpot_p50_ms,
                    m.input_tokens / m.requests, m.requests), runs[0].rounds[0].span)


def vllm_bench_command(base_url, model, a, dataset: Path, result: Path) -> list[str]:
    """`vllm bench serve` on the shared prompts: its custom dataset, in the file's order, no chat
    template, each prompt's reply length out, every request's timing saved."""
    return [resolve_executable("vllm"), "bench", "serve", "--backend", "vllm",
            "--base-url", base_url, "--model", model, "--dataset-name", "custom",
            "--dataset-path", str(dataset), "--disable-shuffle", "--skip-chat-template",
            "--custom-output-len", "-1", "--num-prompts", str(a.requests),
            "--max-concurrency", str(a.concurrency), "--num-warmups", str(a.warmup),
            "--ignore-eos", "--temperature", "0", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(result.parent),
            "--result-filename", result.name]


def vllm_bench_figures(result: Path) -> tuple[Figures, tuple[float, float]]:
    """vllm bench's own figures from its result file, and its timed window (first send to
    last completion, perf_counter: the same clock as tuner's on this machine)."""
    data = json.loads(result.read_text())
    if data.get("failed", 0):
        sys.exit(f"vllm bench serve: {data['failed']} requests failed: {data.get('errors')}")
    begin = min(data["start_times"])
    end = max(t + d for t, d in zip(data["start_times"], data["latencies"], strict=True))
    return (Figures(data["output_throughput"], data["median_ttft_ms"], data["median_itl_ms"],
                    data["median_tpot_ms"], data["total_input_tokens"] / data["completed"],
                    data["completed"]), (begin, end))


def vllm_bench_client(base_url, model, a, dataset: Path, tag: str, out_dir: Path) -> Figures:
    """`vllm bench serve` alone on the server (its turn)."""
    result = out_dir / f"bench-{tag}.json"
    proc = subprocess.run(vllm_bench_command(base_url, model, a, dataset, result),
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.exit(f"vllm bench serve failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return vllm_bench_figures(result)[0]


def together(base_url, model, a, prompts: list[Prompt], dataset: Path, tag: str,
             out_dir: Path, partner: str, guidellm: str | None = None,
             guidellm_delay: float = 0.0
             ) -> tuple[dict[str, Figures], dict[str, tuple[float, float]]]:
    """vllm bench and one `partner` (tuner, or guidellm given its executable) on the server at
    the same time, each keeping `concurrency` requests in flight, so both measure through the
    same seconds of a machine whose speed moves between turns. tuner starts its warm-up when
    vllm bench starts its own, so their timed windows open together; guidellm starts
    `guidellm_delay` seconds after vllm bench does (it reaches its first request sooner). Each
    window ends at its client's own `requests`-th completion. Returns each client's figures and
    its timed window (perf_counter begin, end)."""
    result = out_dir / f"bench-{partner}-{tag}.json"
    proc = subprocess.Popen(vllm_bench_command(base_url, model, a, dataset, result),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    started: list = []  # guidellm's (process, report), once its timer has fired
    later = threading.Timer(guidellm_delay, lambda: started.append(start_guidellm(
        guidellm, base_url, model, a, as_sent(prompts, a.warmup), tag, out_dir)))
    if partner != "guidellm":
        later.cancel()  # it then ends as soon as it starts, starting nothing
    later.start()
    lines: list[str] = []
    got = {}
    try:
        for line in proc.stdout:  # until vllm bench starts sending its load
            lines.append(line)
            if line.startswith(("Warming up", "Starting main benchmark run")):
                break
        else:  # it ended before sending any load: no partner run to pair with it
            proc.wait(timeout=60)
            sys.exit("vllm bench serve failed:\n" + "".join(lines)[-3000:])
        rest = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        rest.start()  # read on, so its output never fills the pipe and stalls it
        try:
            if partner == "tuner":
                got["tuner"] = tuner_client(base_url, model, a, prompts, tag, out_dir, ids=False)
        finally:
            proc.wait(timeout=900)
            rest.join()
    finally:
        later.join()
    if proc.returncode != 0:
        sys.exit("vllm bench serve failed:\n" + "".join(lines)[-3000:])
    got[REFERENCE] = vllm_bench_figures(result)
    if started:
        got["guidellm"] = guidellm_result(*started[0])
    return ({who: figures for who, (figures, _) in got.items()},
            {who: window for who, (_, window) in got.items()})


def next_guidellm_delay(delay: float, windows: dict[str, tuple[float, float]]) -> float:
    """The next round's guidellm delay: moved by half of how far guidellm's window opened from
    vllm bench's, so the windows open together. Half: guidellm starts more slowly once the
    other clients' load is running, so a whole step overshoots by about as much again."""
    if "guidellm" not in windows:
        return delay
    return max(0.0, delay + (windows[REFERENCE][0] - windows["guidellm"][0]) / 2)


def overlap_line(windows: dict[str, tuple[float, float]]) -> str:
    """How each client's timed window sat against vllm bench's: the share of vllm bench's that
    it covered, and how much earlier (-) or later it opened."""
    b0, b1 = windows[REFERENCE]
    return "of vllm bench's window, " + ", ".join(
        f"{who}'s covered {max(0.0, min(t1, b1) - max(t0, b0)) / (b1 - b0):.0%} "
        f"(opened {t0 - b0:+.1f} s)" for who, (t0, t1) in windows.items() if who != REFERENCE)


def own_autogroup(nice: int) -> None:
    """Put this process in a session of its own and give that session's scheduling autogroup
    `nice`: the server and every client are started from here, so they share the group, and on a
    machine shared with other sessions the bench's share of the CPUs moves less with their work."""
    try:
        os.setsid()
        Path("/proc/self/autogroup").write_text(str(nice))
    except OSError as e:
        sys.exit(f"--autogroup-nice: {e}; run the bench under flock (not as a process-group "
                 f"leader) on a kernel with scheduler autogroups, or leave the option out")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=256)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--output-spread", type=float, default=0.5,
                   help="reply lengths drawn uniformly from --output-len x (1 - S .. 1 + S), "
                        "the same for every client, so that requests that start together do "
                        "not stay in step (0: all --output-len)")
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--prompts", nargs="+", choices=PROMPT_SETS, default=["corpus"],
                   help="the prompt texts every client sends, the same ones in the same order: "
                        "tuner's corpus windows, vLLM's random dataset, or both (each client "
                        "then runs once on each, and is compared with vllm bench on the same)")
    p.add_argument("--tuner-ids", action=argparse.BooleanOptionalAction, default=None,
                   help="also run tuner with the prompts as token ids, as a trial's synthetic "
                        "prompts are (its row `tuner ids`; in turns only, and there by "
                        "default); the `tuner` row sends the text")
    p.add_argument("--autogroup-nice", type=int, default=None,
                   help="run in a session of its own whose scheduling autogroup has this nice "
                        "(-20..19; below 0 needs root), so other sessions' work moves rounds less")
    p.add_argument("--server-cores", type=int, default=None,
                   help="hold the server (every process of it) to this many of the first cores "
                        "and every client to the rest, so that no client runs on the server's "
                        "cores and no busy server delays a client's reading (default: half the "
                        "cores; 0: both may use every core, as a trial's clients do)")
    p.add_argument("--together", action=argparse.BooleanOptionalAction, default=True,
                   help="run vllm bench with tuner, then with guidellm, each pair on the server "
                        "at the same time with --concurrency each in flight, so a pair measures "
                        "through the same seconds (the server then holds twice that load); "
                        "--no-together: each client in its turn")
    p.add_argument("--guidellm-delay", type=float, default=5.0,
                   help="with --together, seconds from vllm bench's start to guidellm's in the "
                        "first round (vllm bench takes that much longer to reach its first "
                        "request here); each next round moves it by half of how far guidellm's "
                        "timed window opened from vllm bench's, so the windows line up")
    p.add_argument("--keep", type=Path, default=None,
                   help="a folder to keep every client's raw results in (per request)")
    p.add_argument("--guidellm", default=GUIDELLM_DEFAULT,
                   help="guidellm's executable, or `none` to leave guidellm out")
    p.add_argument("--smoke", action="store_true", help="seconds: 1 round of 16 requests, "
                   "tuner and vllm bench together, on the fake engine")
    a = p.parse_args()
    if a.smoke:
        a.concurrency, a.requests, a.warmup, a.output_len, a.rounds = 4, 16, 2, 16, 1
        a.guidellm = "none"
        print(SMOKE_HEADER, flush=True)
    if not 0 <= a.output_spread < 1:
        sys.exit(f"--output-spread: {a.output_spread} is not in 0..1 (a share of --output-len); "
                 f"pass e.g. 0.5, or 0 for one length")
    if a.together and a.tuner_ids:
        sys.exit("--tuner-ids: together, tuner runs with text prompts only; pass --no-together "
                 "to add `tuner ids` in turns")
    tuner_ids = not a.together if a.tuner_ids is None else a.tuner_ids
    with_guidellm = a.guidellm != "none"
    if with_guidellm and not Path(a.guidellm).exists():
        sys.exit(f"--guidellm: {a.guidellm} not found; install it as this script's docstring "
                 f"says, or pass --guidellm none")

    if a.autogroup_nice is not None:
        own_autogroup(a.autogroup_nice)
    model, _, settings = tiny_vllm(a.model)
    tmp = tempfile.TemporaryDirectory()
    if a.smoke:
        settings = fake_engine(settings, Path(tmp.name) / "fake")
    inv = cpu_inventory()
    server_cpus = client_cpus = None
    if a.server_cores is None:
        a.server_cores = len(inv.devices) // 2
    if a.server_cores:
        if not 0 < a.server_cores < len(inv.devices):
            sys.exit(f"--server-cores: between 1 and {len(inv.devices) - 1} on this machine "
                     f"({len(inv.devices)} cores), so the clients keep at least one; or 0 to "
                     f"let the server and the clients share every core")
        server_cpus = inv.devices[:a.server_cores]
        client_cpus = inv.devices[a.server_cores:]
        inv = dataclasses.replace(inv, devices=server_cpus, per_rank=a.server_cores)
    plan = get_adapter("vllm").launch_plan(
        {"tensor_parallel_size": 1, "max_num_seqs": a.max_num_seqs}, settings,
        host="127.0.0.1", port=free_port(), inventory=inv, devices=list(inv.devices))
    kinds = (["tuner", REFERENCE] + (["tuner ids"] if tuner_ids else [])
             + (["guidellm"] if with_guidellm else [])
             + ([beside("guidellm")] if with_guidellm and a.together else []))
    partners = ["tuner"] + (["guidellm"] if with_guidellm else [])
    sets = list(dict.fromkeys(a.prompts))
    clients = [(kind, prompts) for prompts in sets for kind in kinds]

    def row_name(kind: str, prompts: str) -> str:
        return kind if len(sets) == 1 else f"{kind} · {prompts}"

    with tmp:
        out = a.keep or Path(tmp.name)
        out.mkdir(parents=True, exist_ok=True)
        server = ServerProcess(plan, Path(tmp.name) / "server", cpus=server_cpus)
        server.start()
        if client_cpus is not None:  # this process and every client it starts from now on
            os.sched_setaffinity(0, client_cpus)
            print(f"server on cores {list(server_cpus)}, clients on {list(client_cpus)}")
        try:
            server.wait_ready(300)
            rows, guidellm_delay = [], a.guidellm_delay
            for r in range(a.rounds):
                texts, files = {}, {}
                for prompts in sets:  # made before any client runs, so none waits on them
                    texts[prompts] = shared_prompts(prompts, model, a, r)
                    files[prompts] = write_dataset(texts[prompts],
                                                   out / f"prompts-{prompts}-{r}.jsonl")
                got, overlaps = {}, []
                if a.together:
                    for prompts, partner in itertools.product(sets, partners):
                        figures, windows = together(plan.base_url, model, a, texts[prompts],
                                                    files[prompts], f"{prompts}-{r}", out,
                                                    partner, a.guidellm, guidellm_delay)
                        guidellm_delay = next_guidellm_delay(guidellm_delay, windows)
                        for who in figures:
                            ref = who == REFERENCE and partner != "tuner"
                            got[row_name(beside(partner) if ref else who, prompts)] = figures[who]
                        overlaps.append(overlap_line(windows))
                turn = r % len(clients)
                order = [] if a.together else clients[turn:] + clients[:turn]
                for kind, prompts in order:
                    tag = f"{prompts}-{r}"
                    if kind.startswith("tuner"):
                        figures = tuner_client(plan.base_url, model, a, texts[prompts], tag, out,
                                               ids=kind == "tuner ids")[0]
                    elif kind == REFERENCE:
                        figures = vllm_bench_client(plan.base_url, model, a, files[prompts],
                                                    tag, out)
                    else:
                        figures = run_guidellm(a.guidellm, plan.base_url, model, a,
                                               as_sent(texts[prompts], a.warmup), tag, out)
                    got[row_name(kind, prompts)] = figures
                rows.append({row_name(k, p): got[row_name(k, p)] for k, p in clients})
                line = round_line(r, rows[-1])
                line += "".join(" | " + o for o in overlaps)
                print(line, flush=True)
        finally:
            server.stop()

    print(f"\nconcurrency {a.concurrency}, {a.warmup} warm-up + {a.requests} timed requests, "
          f"{a.input_len} tokens in / {a.output_len} out (x {1 - a.output_spread:g}-"
          f"{1 + a.output_spread:g}), {'together' if a.together else 'in turns'}, "
          f"{a.rounds} rounds, prompts: "
          f"{', '.join(sets)}; medians over rounds, ratios to vllm bench on the same prompts "
          f"[range over rounds]:")
    print("\n".join(table(rows)))
    print("guidellm's ITL is a per-request mean gap: it is in the TPOT column.")
    print("\n".join(verdicts(rows)))


if __name__ == "__main__":
    main()
