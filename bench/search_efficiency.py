"""How many trials a search needs, through the real study loop: run by hand, prints a table.

    .venv/bin/python -m bench.search_efficiency [--seeds 3] [--budget 300] [--warm-start 5]
                                                [--cold] [--smoke]

`--smoke`: the first landscape, one seed, a budget of 5 trials, over a sub-space of its space
(each parameter's first 2 values: writing the fake engine's file of every configuration takes
most of a landscape's time): the whole path in seconds, no figure worth reading.

Landscapes stand in for real measurements of the gpt-oss-120b spaces (vLLM on H200 and B200,
TensorRT-LLM on B200). A landscape is not the model the warm start uses, so that the benchmark
does not grade the model on its own answers. Per seed:

- the model's fitted factors are each perturbed (lognormal, sigma 0.25; the EAGLE-3 acceptance by
  +-0.5 in logit): the model is wrong in ways that reorder configurations;
- each value of each parameter gets its own effect (sigma 3%) and each configuration its own
  (sigma 1%): things the model does not know about, e.g. one MoE kernel being faster.

The value of a configuration is the study's objective: the best tok/s per GPU among levels that
meet the spec's SLA. A configuration the landscape cannot fit in memory crashes when launched.

Each search is a real study (tuner.search.loop.run_study, the spec's sampler with the run's
seed): every trial launches the repository's fake engine (tuner.testing.fake_engine) through tuner's
own adapter and launcher, on a planned node of the landscape's GPU type, and tuner's load
generator measures it, one level at c=8. The fake engine serves each configuration's exact
engine file at a speed proportional to its landscape value (the fastest streams 1,600 tok/s in
all; a request is capped at 1 s, so the slowest configurations are equally slow), and over the
SLA's TTFT where the landscape says the configuration misses it. So what the sampler is told is
measured, with this machine's noise, never copied from the landscape.

- `tpe` (with `--cold`): the study's sampler as tuner configures it;
- `tpe+warm`: the same after `--warm-start K` (tuner.plan.planner.warm_start, the shipped model's
  top K picks first, and its memory check before launch);
- `random`, `grid`: not run; the expected draws of uniform sampling without replacement, and the
  position of the first good configuration in the space's order (a full grid needs all of them
  to know it has the best).

Reported: trials launched until one lands within 2% of the landscape's best (true value, not the
measurement), median over seeds (">B" when the budget B ran out).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tuner.plan import perfmodel as pm
from tuner.plan import planner
from tuner.plan.dry_run import OfflineStudy, offline_study
from tuner.search.context import StudyContext
from tuner.search.loop import run_study
from tuner.spec.study_spec import StudySpec, load_spec
from tuner.store import Store
from tuner.testing.fake_engine import LANDSCAPE_ENV, config_id, fake_vllm
from tuner.verdict.rules import config_key, counts_toward_budget

REPO = Path(__file__).resolve().parents[1]

LANDSCAPES = [("examples/gpt-oss-120b.yaml", "H200"), ("examples/gpt-oss-120b.yaml", "B200"),
              ("examples/gpt-oss-120b-trtllm.yaml", "B200")]
FACTOR_SIGMA, VALUE_SIGMA, CONFIG_SIGMA = 0.25, 0.03, 0.01
WITHIN = 0.02
# The fake engine's timetable: c=8, 16 tokens; the fastest configuration streams 1,600 tok/s in
# all, none takes over 1 s a request; a miss is a TTFT over the bench's 200 ms SLA.
CONCURRENCY, TOKENS, FASTEST_TOK_S, SLOWEST_REQUEST_S = 8, 16, 1600.0, 1.0
TTFT_S, MISS_TTFT_S, SLA_TTFT_MS = 0.005, 0.25, 200
# The engine files read back with libyaml's safe loader where PyYAML has it: the same data as
# yaml.safe_load, in a fraction of its time (a landscape reads one file per configuration).
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
class Landscape:
    """The true objective of every configuration for one seed."""

    def __init__(self, target, screened: planner.Screened, seed: int):
        rng = np.random.default_rng(seed)
        shipped = pm.load_calibration()
        factors = {}
        for name, value in shipped.factors.items():
            if pm.facts().priors[name].transform == "logit":
                z = math.log(value / (1 - value)) + rng.normal(0, 0.5)
                factors[name] = 1 / (1 + math.exp(-z))
            else:
                factors[name] = value * math.exp(rng.normal(0, FACTOR_SIGMA))
        plan = planner.make_plan(target, pm.Calibration(factors, "perturbed", {}), screened)
        effect = {}
        for name, decl in plan.space.parameters.items():
            for v in decl.values:
                effect[(name, repr(v))] = math.exp(rng.normal(0, VALUE_SIGMA))
        self.value: dict[str, float] = {}
        self.meets: dict[str, bool] = {}
        self.fits: dict[str, bool] = {}
        self.params: dict[str, dict[str, Any]] = {}
        p = plan.prediction
        best_any = np.where(p.level_fits, p.tok_s_per_gpu, 0).max(axis=1)
        # Properties that compute over every configuration: once, not once per configuration.
        meets_sla, objective = plan.meets_sla, plan.objective
        for m in range(len(plan.modeled)):
            params = plan.params(m)
            key = config_key(params)
            scale = math.exp(rng.normal(0, CONFIG_SIGMA))
            for name, v in params.items():
                scale *= effect[(name, repr(v))]
            meets = bool(meets_sla[m].any())
            self.meets[key] = meets
            self.params[key] = params
            self.fits[key] = bool(p.config_fits[m, 0])
            self.value[key] = float((objective[m] if meets else best_any[m]) * scale)
        self.best = max(v for k, v in self.value.items() if self.meets[k] and self.fits[k])

    def good(self, key: str) -> bool:
        return self.fits[key] and self.meets[key] and self.value[key] >= (1 - WITHIN) * self.best

    def fraction_good(self) -> float:
        return sum(self.good(k) for k in self.value) / len(self.value)

    def random_expected(self) -> float:
        """Expected draws of uniform sampling without replacement until a good one."""
        good = sum(self.good(k) for k in self.value)
        return (len(self.value) + 1) / (good + 1)


def bench_spec(spec: StudySpec, folder: Path, budget: int, seed: int) -> StudySpec:
    """The landscape's spec with the bench's small sweep, SLA and storage."""
    data = spec.model_dump(mode="json")
    data["workload"].update(prompt_source="synthetic", input_len=TOKENS, output_len=TOKENS,
                            concurrency=[CONCURRENCY], requests_per_level=CONCURRENCY,
                            warmup_requests=0, max_rounds=1, request_rates=None,
                            arrival="concurrency", prompt_file=None)
    data["sla"] = {"ttft_p90_ms": SLA_TTFT_MS, "min_tok_s_per_user_p90": None}
    data["budget"].update(n_trials=budget, trial_timeout_s=60, confirm_top_k=0,
                          timeout_min=None, parallel_trials=1)
    data["sampler"]["seed"] = seed
    # The fake engine's answers are not a model's: the quality gate has nothing to compare.
    data["quality"] = {"enabled": False}
    data["engine"].update(executable=str(fake_vllm(folder / "bin")), ready_timeout_s=30,
                          container=None, port=None)
    data["engine"]["env"] = {**data["engine"].get("env", {}),
                             LANDSCAPE_ENV: str(folder / "landscape.json")}
    data.update(storage=f"sqlite:///{folder / 'tuner.db'}", runs_dir=str(folder / "runs"))
    return StudySpec.model_validate(data)


def context(target: OfflineStudy, spec: StudySpec, name: str) -> StudyContext:
    """A study of the landscape's space on a planned node of its GPU type, served by the fake
    engine."""
    settings = replace(target.settings, executable=spec.engine.executable,
                       env=dict(spec.engine.env), container=None)
    return StudyContext(spec=spec, name=name, space=target.space, adapter=target.adapter,
                        inventory=target.inventory, shape=target.shape, settings=settings,
                        store=Store.open(spec.storage), storage_url=spec.storage,
                        runs_dir=Path(spec.runs_dir), say=lambda _: None, gpu=target.gpu)


def write_landscape(land: Landscape, ctx: StudyContext, path: Path) -> None:
    """The fake engine's behaviour for the exact engine file of every configuration."""
    scale = FASTEST_TOK_S / max(v * ctx.adapter.world_size(land.params[k])
                                for k, v in land.value.items() if land.fits[k])
    configs = {}
    for key, params in land.params.items():
        plan = ctx.adapter.launch_plan(params, ctx.settings, host="127.0.0.1", port=1,
                                       inventory=ctx.inventory,
                                       devices=list(ctx.inventory.devices), workdir=None)
        file = yaml.load(next(iter(plan.files.values())), Loader=YAML_LOADER) or {}
        if not land.fits[key]:
            configs[config_id(file)] = {"fail": "crash"}
            continue
        total = max(land.value[key] * plan.gpus * scale, 1e-9)
        request_s = min(CONCURRENCY * TOKENS / total, SLOWEST_REQUEST_S)
        ttft = TTFT_S if land.meets[key] else MISS_TTFT_S
        configs[config_id(file)] = {"ttft_s": ttft,
                                    "itl_s": max(request_s - ttft, 0.0) / (TOKENS - 1)}
    path.write_text(json.dumps({"configs": configs, "default": {"fail": "bad_argument"}}))


def search(land: Landscape, target: OfflineStudy, spec: StudySpec, folder: Path, name: str,
           budget: int, seed: int, k: int, strict: bool = False) -> tuple[int | None, float]:
    """Trials launched by a real study until one is within 2% of the best (None: not within the
    budget), and the study's wall seconds. `strict` (the smoke run): stop where the fake engine
    refused an engine file the landscape does not hold (its default): the bench no longer
    writes the files tuner launches."""
    ctx = context(target, bench_spec(spec, folder, budget, seed), name)
    reached = threading.Event()
    done = threading.Event()

    def launched() -> list:
        trials = [t for t in ctx.store.trials(name)
                  if counts_toward_budget(t.state, t.failure_kind) and t.state != "running"]
        return sorted(trials, key=lambda t: t.started_at)

    def watch() -> None:
        while not done.wait(0.5):
            if any(land.good(config_key(t.params)) for t in launched()):
                reached.set()
                ctx.stop.set()
                return

    # The model plans for the landscape's own study (its workload and SLA), not the bench's sweep.
    warm = planner.warm_start(target, k, store=ctx.store, study_name=name) if k else None
    watcher = threading.Thread(target=watch, daemon=True)
    t0 = time.perf_counter()
    watcher.start()
    try:
        run_study(ctx, budget, warm_start=warm)
    except KeyboardInterrupt:
        if not reached.is_set():
            raise
    finally:
        done.set()
        watcher.join()
        seconds = time.perf_counter() - t0
    trials = launched()
    ctx.store.close()
    refused = [t for t in trials if "this fake engine" in (t.failure_reason or "")]
    if strict and refused:
        sys.exit(f"trial {refused[0].number}: the fake engine has no behaviour for its engine "
                 f"file ({refused[0].failure_reason}): the landscape misses tuner's files")
    for i, t in enumerate(trials):
        if land.good(config_key(t.params)):
            return i + 1, seconds
    return None, seconds


def sub_space(target: OfflineStudy, n: int) -> OfflineStudy:
    """`target` with each parameter cut to its first `n` values (the smoke run's space)."""
    parameters = {name: decl.model_copy(update={"values": decl.values[:n]})
                  for name, decl in target.space.parameters.items()}
    return dataclasses.replace(target, space=target.space.model_copy(
        update={"parameters": parameters}))


def grid_position(land: Landscape, target) -> int:
    n = 0
    for c in target.space.enumerate():
        key = config_key(c)
        if key not in land.value:
            continue
        n += 1
        if land.good(key):
            return n
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--warm-start", type=int, default=5, dest="k")
    parser.add_argument("--landscapes", type=int, default=len(LANDSCAPES),
                        help="the first N landscapes only")
    parser.add_argument("--cold", action="store_true",
                        help="also run TPE without the warm start (slow: it rarely gets there)")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: the first landscape, one seed, a budget of 5 trials, "
                        "each parameter's first 2 values")
    args = parser.parse_args()
    if args.smoke:
        args.landscapes, args.seeds, args.budget = 1, 1, 5
        print("smoke: 1 landscape, 1 seed, a budget of 5 trials, each parameter's first 2 values: "
              "no figure worth reading", flush=True)

    rows = []
    for spec_rel, gpu in LANDSCAPES[: args.landscapes]:
        spec_path = REPO / spec_rel
        spec = load_spec(spec_path)
        target = offline_study(spec, spec_path, gpu=gpu, engine=None)
        if args.smoke:
            target = sub_space(target, 2)
        screened = planner.screen(target)
        samplers = [("tpe+warm", args.k)] + ([("tpe", 0)] if args.cold else [])
        results: dict[str, list[int | None]] = {name: [] for name, _ in samplers}
        grid, good, expected, seconds = [], [], [], 0.0
        for seed in range(args.seeds):
            land = Landscape(target, screened, seed)
            good.append(land.fraction_good())
            expected.append(land.random_expected())
            grid.append(grid_position(land, target))
            for name, k in samplers:
                with tempfile.TemporaryDirectory(prefix="search-efficiency-") as tmp:
                    folder = Path(tmp)
                    probe = context(target, bench_spec(spec, folder, args.budget, seed), "probe")
                    write_landscape(land, probe, folder / "landscape.json")
                    probe.store.close()
                    n, secs = search(land, target, spec, folder, f"{name}-{seed}",
                                     args.budget, seed, k, strict=args.smoke)
                results[name].append(n)
                seconds += secs
                print(f"  {spec.engine.name} {gpu} seed {seed} {name}: "
                      f"{'>' + str(args.budget) if n is None else n} trials ({secs:.0f} s)",
                      flush=True)
        rows.append((f"{spec.engine.name} {gpu}", len(land.value), float(np.median(good)), grid,
                     float(np.median(expected)), results, seconds))

    print(f"\ntrials launched by the real study loop until one is within {WITHIN:.0%} of the "
          f"landscape's best, median over {args.seeds} seeds (budget {args.budget}; warm start "
          f"K={args.k}); landscapes: factors sigma {FACTOR_SIGMA}, per-value {VALUE_SIGMA:.0%}, "
          f"per-config {CONFIG_SIGMA:.0%}; measured on the fake engine\n")
    header = (f"{'landscape':12} {'configs':>7} {'good':>6} {'grid (order)':>12} "
              f"{'full grid':>9} {'random (expected)':>17} {'tpe':>6} {'tpe+warm':>8} "
              f"{'vs full grid':>12}  per seed tpe+warm")
    print(header)
    print("-" * len(header))
    for name, n_grid, good, grid, expected, results, secs in rows:
        def med(values: list[int | None], budget: int = args.budget) -> str:
            filled = [v if v is not None else budget + 1 for v in values]
            m = float(np.median(filled))
            return f">{budget}" if m > budget else f"{m:g}"

        warm = [v if v is not None else args.budget + 1 for v in results["tpe+warm"]]
        ratio = float(np.median(warm)) / n_grid
        per_seed = ",".join("-" if v is None else str(v) for v in results["tpe+warm"])
        print(f"{name:12} {n_grid:>7,} {good:>6.2%} {med(grid, n_grid):>12} {n_grid:>9,} "
              f"{expected:>17,.0f} {med(results['tpe']) if 'tpe' in results else '-':>6} "
              f"{med(results['tpe+warm']):>8} "
              f"{ratio:>12.4f}  {per_seed}  ({secs:.0f} s)")
    print("\nconfigs: that pass the engine rules; good: share of them within 2% of the best; "
          "grid (order): position of the first good one in the space's order; random "
          "(expected): (configs + 1) / (good + 1), uniform sampling without replacement; "
          "vs full grid: tpe+warm's median over the full grid's trials")


if __name__ == "__main__":
    main()
