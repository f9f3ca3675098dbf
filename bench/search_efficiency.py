"""How many real trials a search needs: run by hand, prints a table.

    .venv/bin/python bench/search_efficiency.py [--seeds 5] [--budget 300] [--warm-start 5]

Landscapes stand in for real measurements of the gpt-oss-120b spaces (vLLM on H200 and B200,
TensorRT-LLM on B200). A landscape is not the model the warm start uses, so that the benchmark
does not grade the model on its own answers. Per seed:

- the model's fitted factors are each perturbed (lognormal, sigma 0.25; the EAGLE-3 acceptance by
  +-0.5 in logit): the model is wrong in ways that reorder configurations;
- each value of each parameter gets its own effect (sigma 3%) and each configuration its own
  (sigma 1%): things the model does not know about, e.g. one MoE kernel being faster;
- every trial measures the landscape with noise (sigma 3%), as repeated runs do.

The value of a configuration is the study's objective: the best tok/s per GPU among levels that
meet the spec's SLA. A configuration the landscape cannot fit in memory fails when launched.

Searches, all through the study loop's rules (tuner.search.loop.run_study): infeasible samples
(engine rules, and with warm start the model's memory check) and repeats of a finished configuration
cost no trial; after 10 asks that launch nothing an untried configuration is handed to the sampler.

- `tpe`: the study's sampler as tuner configures it (tuner.search.bridge.make_sampler, the spec's
  seed replaced by the run's);
- `tpe+warm`: the same after `--warm-start K`: the shipped model's top K picks first;
- `random`: Optuna's RandomSampler;
- `grid`: every configuration in the space's order; a full grid needs all of them to know it has
  the best.

Reported: trials launched until one lands within 2% of the landscape's best (true value, not the
noisy measurement), median over seeds (">B" when the budget B ran out).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuner.plan import perfmodel as pm  # noqa: E402
from tuner.plan import planner  # noqa: E402
from tuner.plan.dry_run import offline_study  # noqa: E402
from tuner.search.bridge import make_sampler, tell_unusable  # noqa: E402
from tuner.search.loop import MAX_IDLE_ASKS  # noqa: E402
from tuner.search.rules import config_key  # noqa: E402
from tuner.spec.study_spec import load_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LANDSCAPES = [("examples/gpt-oss-120b.yaml", "H200"), ("examples/gpt-oss-120b.yaml", "B200"),
              ("examples/gpt-oss-120b-trtllm.yaml", "B200")]
FACTOR_SIGMA, VALUE_SIGMA, CONFIG_SIGMA, NOISE_SIGMA = 0.25, 0.03, 0.01, 0.03
WITHIN = 0.02


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
        p = plan.prediction
        best_any = np.where(p.level_fits, p.tok_s_per_gpu, 0).max(axis=1)
        for m in range(len(plan.modeled)):
            params = plan.params(m)
            key = config_key(params)
            scale = math.exp(rng.normal(0, CONFIG_SIGMA))
            for name, v in params.items():
                scale *= effect[(name, repr(v))]
            meets = bool(plan.meets_sla[m].any())
            self.meets[key] = meets
            self.fits[key] = bool(p.config_fits[m, 0])
            self.value[key] = float((plan.objective[m] if meets else best_any[m]) * scale)
        self.best = max(v for k, v in self.value.items() if self.meets[k] and self.fits[k])

    def good(self, key: str) -> bool:
        return self.fits[key] and self.meets[key] and self.value[key] >= (1 - WITHIN) * self.best

    def fraction_good(self) -> float:
        return sum(self.good(k) for k in self.value) / len(self.value)

    def random_expected(self) -> float:
        """Expected draws of uniform sampling without replacement until a good one."""
        good = sum(self.good(k) for k in self.value)
        return (len(self.value) + 1) / (good + 1)


def search(land: Landscape, target, sampler: optuna.samplers.BaseSampler, budget: int,
           seed: int, warm: list[dict[str, Any]] | None, check, startup: int = 0) -> int | None:
    """Trials launched until one is within 2% of the best (None: not within the budget)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for params in warm or []:
        study.enqueue_trial(params, skip_if_exists=True)
    rng = random.Random(seed)
    noise = np.random.default_rng(seed + 1000)
    done: dict[str, tuple[float, bool]] = {}
    by_key = {config_key(c): c for c in target.space.enumerate()}
    feasible = [k for k in land.value if check(by_key[k]) is None]
    launched = idle = 0
    while launched < budget:
        waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        if idle >= MAX_IDLE_ASKS or (launched < startup and not waiting):  # as the loop does
            untried = [k for k in feasible if k not in done]
            if not untried:
                return None
            study.enqueue_trial(by_key[rng.choice(untried)])
            idle = 0
        trial = study.ask()
        params = target.space.sample(trial)
        key = config_key(params)
        if key in done:
            value, ok = done[key]
            trial.set_constraint("sla", 0.0 if ok else 1.0)
            study.tell(trial, value)
            idle += 1
            continue
        reason = "engine rule" if key not in land.value else check(params)
        if reason:
            tell_unusable(study, trial, "infeasible", "infeasible", reason)
            idle += 1
            continue
        idle = 0
        launched += 1
        if not land.fits[key]:  # launched, and ran out of memory
            tell_unusable(study, trial, "failed", "oom", "out of memory")
            done[key] = (0.0, False)
        else:
            measured = land.value[key] * math.exp(noise.normal(0, NOISE_SIGMA))
            trial.set_constraint("sla", 0.0 if land.meets[key] else 1.0)
            study.tell(trial, measured)
            done[key] = (measured, land.meets[key])
        if land.good(key):
            return launched
    return None


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
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--warm-start", type=int, default=5, dest="k")
    args = parser.parse_args()

    rows = []
    for spec_rel, gpu in LANDSCAPES:
        t0 = time.perf_counter()
        spec_path = REPO / spec_rel
        spec = load_spec(spec_path)
        target = offline_study(spec, spec_path, gpu=gpu, engine=None)
        screened = planner.screen(target)
        nominal = planner.make_plan(target, pm.load_calibration(), screened)
        warm = [nominal.params(m) for m in planner.top_distinct(nominal, args.k)]
        fit_check = nominal.fit_check()
        results: dict[str, list[int | None]] = {"tpe": [], "tpe+warm": [], "random": []}
        grid, good, expected = [], [], []
        for seed in range(args.seeds):
            land = Landscape(target, screened, seed)
            good.append(land.fraction_good())
            expected.append(land.random_expected())
            grid.append(grid_position(land, target))
            tpe_spec = spec.model_copy(update={"sampler": spec.sampler.model_copy(
                update={"seed": seed})})

            def rule_only(params: dict[str, Any]) -> str | None:
                return None

            startup = tpe_spec.sampler.n_startup_trials
            results["tpe"].append(search(land, target, make_sampler(tpe_spec, seed), args.budget,
                                         seed, None, rule_only, startup))
            results["tpe+warm"].append(search(land, target, make_sampler(tpe_spec, seed),
                                              args.budget, seed, warm, fit_check, startup))
            results["random"].append(search(land, target, optuna.samplers.RandomSampler(seed),
                                            args.budget, seed, None, rule_only))
        n_grid = len(nominal.modeled)
        rows.append((f"{spec.engine.name} {gpu}", n_grid, float(np.median(good)), grid,
                     float(np.median(expected)), results, time.perf_counter() - t0))

    print(f"trials until within {WITHIN:.0%} of the landscape's best, median over "
          f"{args.seeds} seeds (budget {args.budget}; warm start K={args.k}); landscapes: "
          f"factors sigma {FACTOR_SIGMA}, per-value {VALUE_SIGMA:.0%}, per-config "
          f"{CONFIG_SIGMA:.0%}, measurement noise {NOISE_SIGMA:.0%}\n")
    header = (f"{'landscape':12} {'configs':>7} {'good':>6} {'grid (order)':>12} "
              f"{'full grid':>9} {'random':>7} {'(expected)':>10} {'tpe':>7} {'tpe+warm':>8}  "
              f"per seed tpe+warm")
    print(header)
    print("-" * len(header))
    for name, n_grid, good, grid, expected, results, secs in rows:
        def med(values: list[int | None], budget: int = args.budget) -> str:
            filled = [v if v is not None else budget + 1 for v in values]
            m = float(np.median(filled))
            return f">{budget}" if m > budget else f"{m:g}"

        per_seed = ",".join("-" if v is None else str(v) for v in results["tpe+warm"])
        print(f"{name:12} {n_grid:>7,} {good:>6.2%} {med(grid, n_grid):>12} {n_grid:>9,} "
              f"{med(results['random']):>7} {expected:>10,.0f} {med(results['tpe']):>7} "
              f"{med(results['tpe+warm']):>8}  {per_seed}  ({secs:.0f} s)")
    print("\nconfigs: that pass the engine rules; good: share of them within 2% of the best; "
          "grid (order): position of the first good one in the space's order; random "
          "(expected): (configs + 1) / (good + 1), uniform sampling without replacement")


if __name__ == "__main__":
    main()
