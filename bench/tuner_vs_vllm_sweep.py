"""tuner against vLLM's own tuning tool over one small space: the same 6 server configurations
(max-num-seqs {4, 16, 64} x max-num-batched-tokens {256, 2048}, TP1, the tiny gpt-oss) at
concurrency {4, 16}, random 64-token prompts and 64 output tokens, measured by `vllm bench sweep
serve` (its grid: one `vllm serve` per configuration, one `vllm bench serve` per level) and by a
tuner grid study (`sampler: grid`, its confirmations and head-to-head), interleaved sweep, tuner,
sweep, tuner so that the machine's drift falls on both. Run by hand (it starts vLLM; ~40 min):

    flock /tmp/tuner-vllm.lock .venv/bin/python -m bench.tuner_vs_vllm_sweep \
        [--runs 2] [--num-prompts 200] [--requests 48] [--max-rounds 12] [--smoke] \
        [--warmup-ablation N | --layout-ablation]

`--smoke`: 1 configuration at concurrency 4, few requests, one run of each, no head-to-head
(~1.5 minutes).

The same requests both ways: random token ids (tuner's `prompt_source: synthetic`, the bench's
`--dataset-name random`), exactly 64 output tokens (ignore_eos), greedy (`--temperature 0`).
Each tool measures its own way: the sweep `--num-prompts` requests per point, no warm-up (its
defaults); tuner the README demo's rounds (4 warm-up requests, then rounds of `--requests` until
the 95% interval is within 5% or `--max-rounds`), no SLA, no quality gate, then its best 2
confirmed side by side. Logs, result files and databases stay in the printed temp folder.

Printed per point (seqs, tokens, concurrency): each sweep run's output tok/s and their median,
each tuner run's (the trial's own sweep: the mean of its rounds) and their median, tuner's
figure per compute core (`/core med`: tok/s over the trial's cores, 1 for TP1 here), and
tuner / sweep (medians); then per run each tool's best configuration at the
top level (c=16), tuner's pick with its head-to-head verdict, each run's wall time, and tuner's
round-to-round spread (sd/mean) at the top level per configuration and its largest.

Equal cores: tuner's TP1 trial on 2 cores gives its rank one core and the frontend (API server,
engine core) and load generator the other (tuner.serve.hardware.bind_ranks: frontend 1,
cores_per_rank 1), and its per-core figure divides by that one core. vLLM's default binding is
one core for the rank too (vllm 0.32, vllm/utils/ompmultiprocessing.py, used by the
multiprocessing executor for every CPU worker): VLLM_CPU_OMP_THREADS_BIND defaults to `auto`
(envs.py); on x86 `self.reserve_cpu_num = self.local_world_size` (1 for TP1) unless
VLLM_CPU_NUM_OF_RESERVED_CPU overrides it; `auto` takes one logical CPU per physical core of the
rank's NUMA node (`lambda cpus: cpus[-1:]`: cores 0 and 1 here, one node, no SMT) and then
`reserved_cpu_list.extend(cpu_lists_of_ranks[i][-num:])`, so the rank's OpenMP threads run on
core 0 (OMP_NUM_THREADS=1, OMP_PLACES={0}) and core 1 is "reserved". Nothing is bound to the
reserved core, though: vLLM's frontend and `vllm bench serve` stay wherever the kernel puts them,
on either core, where tuner holds them to core 1. The sweep's server log line is printed as proof.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

from bench.tiny_vllm import tiny_vllm
from tuner.measure.stats import spread_of_interval
from tuner.serve.cpu_layout import CpuLayout, pin_frontend
from tuner.serve.launcher import free_port
from tuner.spec.space import describe
from tuner.store import Store
from tuner.verdict.finalists import summary_lines
from tuner.verdict.rules import winner

REPO = Path(__file__).resolve().parents[1]
VLLM = REPO / ".venv" / "bin" / "vllm"
TUNER = REPO / ".venv" / "bin" / "tuner"
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
ENGINE_ARGS = "--max-model-len 512 --dtype bfloat16 --enforce-eager --no-enable-prefix-caching"
Config = tuple[int, int]  # (max-num-seqs, max-num-batched-tokens)
Point = tuple[int, int, int]  # (max-num-seqs, max-num-batched-tokens, concurrency)


def machine() -> str:
    info = Path("/proc/cpuinfo").read_text()
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                  if ln.startswith("model name")), "unknown CPU")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines()
                  if ln.startswith("flags")), [])
    return (f"{model}, {len(os.sched_getaffinity(0))} cores, avx512f "
            f"{'yes' if 'avx512f' in flags else 'no'}; {dt.datetime.now():%Y-%m-%d %H:%M}")


# Where the sweep's processes run (--layout-ablation). "vllm": vLLM's default (the rank on
# core 0, everything else floating). "client": the same, `vllm bench serve` held to core 1.
# "frontend": tuner's layout with vLLM's own server and client: the client held to core 1 and,
# once the server is up, every server process but its worker (API server, engine core) held to
# core 1 by tuner's own `pin_frontend`, as a tuner trial does. (Holding the whole sweep to core 1
# instead also holds the worker's other threads there: it measured 525 tok/s, not a layout.)
LAYOUTS = {"vllm": "vLLM's default", "client": "client on core 1",
           "frontend": "frontend and client on core 1"}
FRONTEND_LAYOUT = CpuLayout(ranks=((0,),), frontend=(1,), client=(1,))


def hold_frontends(sweep: subprocess.Popen) -> None:
    """Until the sweep ends, hold each of its servers' frontend processes to core 1 (every
    second: each configuration starts a new server)."""
    while sweep.poll() is None:
        try:
            procs = [c for c in psutil.Process(sweep.pid).children(recursive=True)
                     if "bench" not in " ".join(c.cmdline())]
        except psutil.Error:
            procs = []
        try:
            pin_frontend(procs, FRONTEND_LAYOUT)
        except (psutil.Error, OSError):
            pass  # a process that ended between the listing and the pinning
        time.sleep(1.0)


def run_sweep(model: str, configs: list[Config], levels: list[int], prompts: int,
              folder: Path, warmup: int = 0, layout: str = "vllm"
              ) -> tuple[dict[Point, float], float, str]:
    """`vllm bench sweep serve` over the grid: output tok/s per point, wall seconds, and the
    server's own line saying where it bound the rank."""
    folder.mkdir(parents=True)
    (folder / "serve.json").write_text(json.dumps(
        [{"max_num_seqs": s, "max_num_batched_tokens": t} for s, t in configs]))
    (folder / "bench.json").write_text(json.dumps([{"max_concurrency": c} for c in levels]))
    port = free_port()
    # Greedy, as tuner's requests are: vLLM 0.32's bench no longer sends temperature 0, and the
    # tiny model's generation config sets none, so it would sample at temperature 1 (a different
    # request). --disable-tqdm only quiets the log. No warm-up requests: the tool's default.
    client = "taskset -c 1 " if layout in ("client", "frontend") else ""
    bench = (f"{client}{VLLM} bench serve --model {model} --host 127.0.0.1 --port {port} "
             f"--dataset-name random --random-input-len 64 --random-output-len 64 "
             f"--num-prompts {prompts} --ignore-eos --temperature 0 --disable-tqdm")
    cmd = [str(VLLM), "bench", "sweep", "serve",
           "--serve-cmd", f"{VLLM} serve {model} {ENGINE_ARGS} --port {port}",
           "--bench-cmd", bench, "--serve-params", str(folder / "serve.json"),
           "--bench-params", str(folder / "bench.json"), "--num-runs", "1",
           "-o", str(folder / "out"), "-e", "sweep", "--continue-on-error", "--show-stdout",
           "--warmup-num-prompts", str(warmup)]
    # vLLM's default binding: drop whatever the calling shell set.
    env = {k: v for k, v in os.environ.items()
           if k not in ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")} | ENV
    log = folder / "sweep.log"
    start = time.monotonic()
    with log.open("w") as out:
        sweep = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=folder)
        if layout == "frontend":
            threading.Thread(target=hold_frontends, args=(sweep,), daemon=True).start()
        rc = sweep.wait()
    wall = time.monotonic() - start
    if rc:
        print(f"  vllm bench sweep serve exited {rc}: see {log}")
    points = {}
    for f in sorted((folder / "out" / "sweep").glob("*/run=0.json")):
        r = json.loads(f.read_text())
        if r.get("completed"):
            key = (r["max_num_seqs"], r["max_num_batched_tokens"], r["max_concurrency"])
            points[key] = float(r["output_throughput"])
    for f in (folder / "out" / "sweep").glob("**/*failure.json"):
        print(f"  sweep failure {f.name}: {json.loads(f.read_text())['error']}")
    text = log.read_text(errors="replace").splitlines()
    # vLLM logs "(EngineCore pid=N) INFO ... [ompmultiprocessing.py:185] \tlocal_rank=0, ...".
    binding = [m.group(0) for ln in text
               if (m := re.search(r"(local_rank=\d+, core ids=|reserved_cpus=)\S*", ln))][:2]
    return points, wall, ", ".join(binding) or "(no binding line in the server log)"


def tuner_spec(model: str, configs: list[Config], levels: list[int], a: argparse.Namespace,
               folder: Path) -> Path:
    """The README demo's spec (examples/tiny-moe-cpu.yaml: engine, hardware) with this grid."""
    space = {"name": "tuner-vs-sweep", "description": "bench/tuner_vs_vllm_sweep.py's grid",
             "engine": "vllm", "parameters": {
                 "tensor_parallel_size": {"values": [1]},
                 "max_batch_size": {"values": sorted({s for s, _ in configs})},
                 "max_num_tokens": {"values": sorted({t for _, t in configs})}}}
    (folder / "space.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    spec = yaml.safe_load((REPO / "examples" / "tiny-moe-cpu.yaml").read_text())
    spec.pop("sla", None)  # no SLA: every level counts, as the sweep's do
    spec.update(
        name=f"tuner-vs-sweep-{folder.name}", search_space=str(folder / "space.yaml"),
        model={"path": model}, runs_dir=str(folder / "runs"),
        # synthetic: random token ids, what `vllm bench serve --dataset-name random` sends
        workload={"prompt_source": "synthetic", "input_len": 64, "output_len": 64,
                  "concurrency": levels, "requests_per_level": a.requests,
                  "max_rounds": a.max_rounds, "ci_target": 0.05, "warmup_requests": 4},
        sampler={"name": "grid", "seed": 0},
        budget={"n_trials": len(configs), "timeout_min": 40, "trial_timeout_s": 900,
                "confirm_top_k": a.finalists},
        quality={"enabled": False})
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_tuner(model: str, configs: list[Config], levels: list[int], a: argparse.Namespace,
              folder: Path) -> tuple[dict, float]:
    """`tuner run` on the grid, then its results as the store holds them."""
    folder.mkdir(parents=True)
    spec = tuner_spec(model, configs, levels, a, folder)
    url = f"sqlite:///{folder / 'run.db'}"
    log = folder / "tuner.log"
    start = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.run([str(TUNER), "run", str(spec), "--storage", url, "--export-dir",
                             str(folder / "exports")], cwd=REPO, stdout=out,
                            stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    if rc:
        print(f"  tuner run exited {rc}: see {log}")
    res: dict = {"points": {}, "per_core": {}, "spread": {}, "pick": None, "h2h": [],
                 "layout": next((ln.strip() for ln in log.read_text(errors="replace")
                                 .splitlines() if "layout:" in ln), "")}
    if not (folder / "run.db").exists():
        return res, wall
    with Store.open(url, create=False) as store:
        (study,) = store.list_studies()
        trials = store.trials(study.name)
        for t in sorted(trials, key=lambda t: t.number):
            cfg = (t.params["max_batch_size"], t.params["max_num_tokens"])
            if t.state != "complete":
                print(f"  tuner trial {t.number} {describe(t.params)}: {t.state} "
                      f"{t.failure_kind or ''} {t.failure_reason or ''}".rstrip())
                continue
            for m in t.measurements:
                key = (*cfg, m.concurrency)
                if key in res["points"]:
                    continue  # a retry of a configuration: the first measurement counts
                res["points"][key] = m.output_tok_s
                res["per_core"][key] = m.output_tok_s_per_gpu
                if m.rounds and m.rounds > 1 and m.output_tok_s_ci95 is not None:
                    res["spread"][key] = spread_of_interval(m.output_tok_s_ci95, m.output_tok_s,
                                                            m.rounds)
        try:
            best = winner(study, trials)
            res["pick"] = (f"trial {best.number} {describe(best.params)} "
                           f"({best.confirm_state or 'not confirmed'})")
        except Exception as e:  # noqa: BLE001 (no winner is a result to print, not a crash)
            res["pick"] = f"none: {e}"
        if study.head_to_head is not None:
            res["h2h"] = summary_lines(study.head_to_head)
    return res, wall


def fmt(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def top(points: dict[Point, float], level: int) -> str:
    at = {k: v for k, v in points.items() if k[2] == level}
    if not at:
        return "none"
    (s, t, _), v = max(at.items(), key=lambda kv: kv[1])
    return f"seqs={s} tokens={t} ({v:,.0f} tok/s)"


def report(sweeps: list, tuners: list, configs: list[Config], levels: list[int]) -> None:
    n, top_level = len(sweeps), max(levels)
    head = ([f"sweep {i + 1}" for i in range(n)] + ["sweep med"]
            + [f"tuner {i + 1}" for i in range(n)] + ["tuner med", "/core med", "tuner/sweep"])
    print(f"\n{'seqs':>5}{'tokens':>7}{'c':>4}" + "".join(f"{h:>12}" for h in head))
    for s, t in configs:
        for c in levels:
            sw = [r[0].get((s, t, c)) for r in sweeps]
            tu = [r[0]["points"].get((s, t, c)) for r in tuners]
            core = median([r[0]["per_core"].get((s, t, c)) for r in tuners])
            sm, tm = median(sw), median(tu)
            ratio = tm / sm if sm and tm is not None else None
            cells = [*sw, sm, *tu, tm, core]
            print(f"{s:>5}{t:>7}{c:>4}" + "".join(f"{fmt(v):>12}" for v in cells)
                  + f"{fmt(ratio, '.2f'):>12}")
    for i, ((sw, sw_wall, binding), (tu, tu_wall)) in enumerate(zip(sweeps, tuners,
                                                                     strict=True)):
        print(f"\nrun {i + 1}: sweep {sw_wall / 60:.1f} min, tuner {tu_wall / 60:.1f} min")
        print(f"  best at c={top_level}: sweep {top(sw, top_level)}; "
              f"tuner {top(tu['points'], top_level)}")
        print(f"  tuner's pick: {tu['pick']}")
        for line in tu["h2h"]:
            print(f"    {line}")
        spreads = {k: v for k, v in tu["spread"].items() if k[2] == top_level}
        text = ", ".join(f"{s}/{t} {v:.1%}" for (s, t, _), v in sorted(spreads.items()))
        largest = fmt(max(spreads.values(), default=None), ".1%")
        print(f"  tuner round spread (sd/mean) at c={top_level}, seqs/tokens: {text or '-'}; "
              f"max {largest}")
        print(f"  vLLM's binding (sweep server log): {binding}")
        print(f"  tuner's {tu['layout'] or 'layout: (no layout line in the tuner log)'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=".tuner/models/tiny-gpt-oss")
    p.add_argument("--runs", type=int, default=2, help="sweep, tuner pairs")
    p.add_argument("--num-prompts", type=int, default=200, help="vllm bench serve, per level")
    p.add_argument("--requests", type=int, default=48, help="tuner's requests_per_level")
    p.add_argument("--max-rounds", type=int, default=12, help="tuner's max_rounds")
    p.add_argument("--finalists", type=int, default=2, help="tuner's confirm_top_k (its "
                   "head-to-head)")
    p.add_argument("--smoke", action="store_true", help="1 configuration, c=4, 1 run, no "
                   "head-to-head")
    p.add_argument("--warmup-ablation", type=int, metavar="N", default=0,
                   help="instead: vLLM's sweep alone, without and with N warm-up prompts per "
                   "point, in turns, over seqs 16 and 64 x tokens 256 at c=16")
    p.add_argument("--layout-ablation", action="store_true",
                   help="instead: vLLM's sweep alone in three layouts (its default; its client on "
                   "core 1; its frontend and client on core 1), in turns, over seqs 16 and 64 x "
                   "tokens 256 at c=16")
    a = p.parse_args()
    if a.layout_ablation:
        layout_ablation(a)
        return
    if a.warmup_ablation:
        warmup_ablation(a)
        return
    configs = [(s, t) for s in (4, 16, 64) for t in (256, 2048)]
    levels = [4, 16]
    if a.smoke:
        # One server each way: the smoke proves the path, the full run measures.
        configs, levels = [(64, 2048)], [4]
        a.runs, a.num_prompts, a.requests, a.max_rounds, a.finalists = 1, 16, 16, 2, 0

    os.chdir(REPO)  # the model path and tuner's cwd are the repository's
    model, _, _ = tiny_vllm(a.model)
    print(f"machine: {machine()}")
    folder = Path(tempfile.mkdtemp(prefix="tuner-vs-sweep-"))
    print(f"{len(configs)} configurations x c={levels}, {a.runs} run(s); sweep: "
          f"{a.num_prompts} prompts per point; tuner: {a.requests} requests per round, at most "
          f"{a.max_rounds} rounds; logs and databases in {folder}", flush=True)
    sweeps, tuners = [], []
    for i in range(a.runs):
        print(f"run {i + 1}: vllm bench sweep serve ...", flush=True)
        sweeps.append(run_sweep(model, configs, levels, a.num_prompts, folder / f"sweep{i + 1}"))
        print(f"run {i + 1}: tuner run ...", flush=True)
        tuners.append(run_tuner(model, configs, levels, a, folder / f"tuner{i + 1}"))
    report(sweeps, tuners, configs, levels)


def ablation_start(a: argparse.Namespace, prefix: str
                   ) -> tuple[str, list[Config], list[int], Path]:
    """What both ablations measure (seqs 16 and 64 x tokens 256 at c=16), the model, and a
    folder for their logs, said at the start."""
    os.chdir(REPO)
    model, _, _ = tiny_vllm(a.model)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    print(f"machine: {machine()}\nvllm bench sweep serve, c=16, {a.num_prompts} prompts; "
          f"logs in {folder}", flush=True)
    return model, [(16, 256), (64, 256)], [16], folder


def warmup_ablation(a: argparse.Namespace) -> None:
    """How much of the sweep's figure is its server's first requests: each point measured
    without a warm-up (the tool's default) and with `a.warmup_ablation` warm-up prompts."""
    model, configs, levels, folder = ablation_start(a, "sweep-warmup-")
    rows: dict[Point, dict[int, list[float]]] = {}
    for i in range(a.runs):
        for warmup in (0, a.warmup_ablation):
            got, _, _ = run_sweep(model, configs, levels, a.num_prompts,
                                  folder / f"run{i + 1}-warmup{warmup}", warmup)
            for point, value in got.items():
                rows.setdefault(point, {}).setdefault(warmup, []).append(value)
    warm_title = f"warm-up {a.warmup_ablation}"
    print(f"\n seqs tokens   c  {'no warm-up (runs)':>22}  {warm_title:>22}")
    for (seqs, tokens, c), by in sorted(rows.items()):
        cold = ", ".join(f"{v:,.0f}" for v in by.get(0, []))
        warm = ", ".join(f"{v:,.0f}" for v in by.get(a.warmup_ablation, []))
        print(f"{seqs:>5} {tokens:>6} {c:>3}  {cold:>22}  {warm:>22}")


def layout_ablation(a: argparse.Namespace) -> None:
    """How much of the gap between the tools is where the sweep's frontend and client run:
    each point measured by vLLM's own sweep in each of LAYOUTS, in turns."""
    model, configs, levels, folder = ablation_start(a, "sweep-layout-")
    rows: dict[Point, dict[str, list[float]]] = {}
    for i in range(a.runs):
        for layout in LAYOUTS:
            got, _, binding = run_sweep(model, configs, levels, a.num_prompts,
                                        folder / f"run{i + 1}-{layout}", layout=layout)
            print(f"  run {i + 1}, {LAYOUTS[layout]}: {binding}", flush=True)
            for point, value in got.items():
                rows.setdefault(point, {}).setdefault(layout, []).append(value)
        print(f"  run {i + 1}: tuner run ...", flush=True)
        res, _ = run_tuner(model, configs, levels, a, folder / f"run{i + 1}-tuner-study")
        for point, value in res["points"].items():
            rows.setdefault(point, {}).setdefault("tuner run", []).append(value)
    columns = {**LAYOUTS, "tuner run": "tuner (its layout)"}
    print("\n seqs tokens   c  " + "  ".join(f"{t:>30}" for t in columns.values()))
    for (seqs, tokens, c), by in sorted(rows.items()):
        cells = ("; ".join(f"{v:,.0f}" for v in by.get(col, [])) for col in columns)
        print(f"{seqs:>5} {tokens:>6} {c:>3}  " + "  ".join(f"{cell:>30}" for cell in cells))


if __name__ == "__main__":
    main()
