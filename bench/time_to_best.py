"""Time to the best configuration: a grid study and TPE studies of the same tiny CPU space, real
vLLM trials, one run. Run by hand (20 to 40 minutes on a 2-core machine):

    .venv/bin/python -m bench.time_to_best [--seeds 3]
    .venv/bin/python -m bench.time_to_best --from sqlite:////tmp/time-to-best-XXXX/tuner.db
    .venv/bin/python -m bench.time_to_best --again /tmp/time-to-best-XXXX [--seeds 3]

The space (bench/time_to_best_space.yaml) has 12 configurations, all of which launch; the study is
the README demo's (examples/tiny-moe-cpu.yaml: its engine, workload and SLA) with that space, no
confirmations and no time limit. First a grid study (`sampler: grid`) measures every
configuration once; its best is the trial with the highest objective among those that met the
SLA, and "within the grid best's interval" means an objective that met the SLA and is at least
the lower end of the 95% interval of the best's level (output tok/s per GPU). Then one TPE study
per seed runs until its first such trial (at most 12 launches).

Each study's time to best is the wall time from its first server start to the end of its first
trial within that interval, and its launches the servers started until then. For the grid this
is printed three ways: in its own seeded order; expected over random orders of the same trials,
each taking the time it took (`grid, any order`: what a grid's order is worth on average); and
the whole grid, which is what a grid needs to know it has the best. The ratios are TPE's time
over each. The studies' database is kept, and `--from URL` prints the table again from it.

A TPE study reaches the best two ways, both printed: `measured` when a trial of its own meets
the SLA within that interval, `found` when it launches a configuration the grid measured within
it (the grid's verdict on each configuration is the reference, as in tabular benchmarks of
hyperparameter search). On 2 shared cores one configuration can measure 2x apart on two servers,
so `measured` also races the servers' noise; `found` is the search's own speed. The race runs
until both have happened (or the space is exhausted).

Not measured: a warm-started TPE. The performance model that warm-starts a study has datasheet
figures for GPU types only, so on this machine there is no model to warm-start from.

`--smoke`: the same race, one TPE seed, on the repository's fake engine (tuner.testing.fake_engine)
over 3 configurations (batch 4, 16, 64; the fake serves batch 64 three times as fast), levels of
a few short rounds at c=4 and no quality gate (the fake's answers are not a model's): seconds,
and nothing about vLLM or this space.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import yaml

from bench.tiny_vllm import tiny_model
from tuner.search.context import StudyContext, prepare
from tuner.search.loop import run_study
from tuner.spec.space import describe
from tuner.spec.study_spec import load_spec
from tuner.store import Store, TrialRecord
from tuner.testing.fake_engine import LANDSCAPE_ENV, fake_vllm
from tuner.verdict.rules import (
    best_level,
    config_key,
    counts_toward_budget,
    interval,
    met_sla,
    study_sla,
)

REPO = Path(__file__).resolve().parents[1]

SPACE = REPO / "bench" / "time_to_best_space.yaml"
CONFIGS = 12
SMOKE_CONFIGS = 3


def study_spec(folder: Path, name: str, sampler: str, seed: int, smoke: bool = False) -> Path:
    spec = yaml.safe_load((REPO / "examples" / "tiny-moe-cpu.yaml").read_text())
    spec.update(name=name, search_space=str(SPACE), storage=f"sqlite:///{folder / 'tuner.db'}",
                runs_dir=str(folder / "runs"))
    spec["sampler"] = {"name": sampler, "seed": seed, "n_startup_trials": 3}
    spec["budget"] = {**spec["budget"], "n_trials": CONFIGS, "timeout_min": None,
                      "confirm_top_k": 0}
    if smoke:
        smoke_spec(spec, folder)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def smoke_spec(spec: dict, folder: Path) -> None:
    """The study served by the fake engine: 3 configurations, batch 64 three times as fast as
    the others, levels of up to 3 rounds of 8 requests at c=4, no quality gate."""
    space, landscape = folder / "smoke-space.yaml", folder / "landscape.json"
    space.write_text(yaml.safe_dump({"name": "time-to-best-smoke", "engine": "vllm",
                                     "parameters": {"max_batch_size": {"values": [4, 16, 64]}}}))
    landscape.write_text(json.dumps({"default": {"ttft_s": 0.005, "itl_s": 0.003}, "rules": [
        {"match": {"max-num-seqs": 64}, "itl_s": 0.001}]}))
    spec["model"]["path"] = str(tiny_model(spec["model"]["path"]).resolve())
    spec["search_space"] = str(space)
    spec["engine"].update(executable=str(fake_vllm(folder / "bin")), ready_timeout_s=30,
                          env={**spec["engine"]["env"], LANDSCAPE_ENV: str(landscape)})
    spec["workload"].update(concurrency=[4], requests_per_level=8, max_rounds=3,
                            warmup_requests=1, output_len=16)
    spec["budget"]["n_trials"] = SMOKE_CONFIGS
    spec["quality"] = {"enabled": False}


def context(folder: Path, name: str, sampler: str, seed: int,
            smoke: bool = False) -> StudyContext:
    path = study_spec(folder, name, sampler, seed, smoke)
    return prepare(load_spec(path), path, storage_url=None, study_name=None,
                   say=lambda line: print(f"  [{name}] {line}", flush=True))


def launched(store: Store, name: str) -> list[TrialRecord]:
    """The trials that started a server and reached a verdict (pruned ones included: the
    budget's rule), in start order."""
    trials = [t for t in store.trials(name)
              if t.state != "running" and counts_toward_budget(t.state, t.failure_kind)]
    return sorted(trials, key=lambda t: t.started_at)


def within(trial: TrialRecord, floor: float) -> bool:
    return met_sla(trial) and trial.objective >= floor


Reached = Callable[[TrialRecord], bool]


def time_to(trials: list[TrialRecord], reached: Reached) -> tuple[float | None, int]:
    """Wall seconds from the first start to the end of the first trial that reached the best,
    and the servers launched until then (all of them when none got there)."""
    for i, t in enumerate(trials):
        if reached(t):
            return (t.finished_at - trials[0].started_at).total_seconds(), i + 1
    return None, len(trials)


def measured(floor: float) -> Reached:
    """A trial of the study's own that met the SLA within the grid best's interval."""
    return lambda t: within(t, floor)


def found(grid_trials: list[TrialRecord], floor: float) -> Reached:
    """A trial of a configuration the grid measured within its best's interval."""
    good = {config_key(t.params) for t in grid_trials if within(t, floor)}
    return lambda t: config_key(t.params) in good


def in_any_order(trials: list[TrialRecord], floor: float, draws: int = 20_000
                 ) -> tuple[float, float]:
    """A grid's expected seconds and launches to its first trial within `floor` over random
    orders of the same trials, each taking the time it took here (its pruning, which depends on
    the order, included as it happened)."""
    rng = random.Random(0)
    took = [(t.finished_at - t.started_at).total_seconds() for t in trials]
    good = [within(t, floor) for t in trials]
    seconds = launches = 0.0
    order = list(range(len(trials)))
    for _ in range(draws):
        rng.shuffle(order)
        for n, i in enumerate(order, 1):
            seconds += took[i]
            if good[i]:
                launches += n
                break
    return seconds / draws, launches / draws


def grid_best(store: Store, name: str) -> tuple[TrialRecord, float]:
    """The grid's best trial and the floor of its interval (objective minus half-width)."""
    ok = [t for t in launched(store, name) if met_sla(t)]
    if not ok:
        sys.exit("no configuration of the grid met the SLA: nothing to race towards")
    best = max(ok, key=lambda t: t.objective)
    level, _ = best_level(best.measurements, study_sla(store.get_study(name)))
    return best, interval(level)[0]


def race(ctx: StudyContext, goals: list[Reached], configs: int = CONFIGS) -> None:
    """Run the study until each goal has been reached by a trial (the loop is stopped then)."""
    done, reached = threading.Event(), threading.Event()

    def watch() -> None:
        while not done.wait(2.0):
            trials = launched(ctx.store, ctx.name)
            if all(any(goal(t) for t in trials) for goal in goals):
                reached.set()
                ctx.stop.set()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run_study(ctx, configs)
    except KeyboardInterrupt:
        if not reached.is_set():  # Ctrl-C or SIGTERM, not the watcher: stop the bench
            raise
    finally:
        done.set()
        watcher.join()


def run(seeds: int, folder: Path | None = None, smoke: bool = False) -> str:
    """The grid study (unless `folder` holds one already), then one TPE study per seed racing
    to the grid's best, each a new study; returns the database's URL (kept, so the figures can
    be read again: `--from URL`). `smoke`: a new race in `folder`, on the fake engine."""
    again = folder is not None and not smoke
    configs = SMOKE_CONFIGS if smoke else CONFIGS
    folder = folder or Path(tempfile.mkdtemp(prefix="time-to-best-"))
    print(f"studies in {folder / 'tuner.db'}", flush=True)
    grid = context(folder, "grid", "grid", 0, smoke)
    if not again:
        run_study(grid, configs)
    _, floor = grid_best(grid.store, "grid")
    goals = [measured(floor), found(launched(grid.store, "grid"), floor)]
    taken = {s.name for s in grid.store.list_studies()}
    for seed in range(seeds):
        name = next(f"tpe-{seed}" + (f"-{k}" if k else "") for k in range(100)
                    if f"tpe-{seed}" + (f"-{k}" if k else "") not in taken)
        race(context(folder, name, "tpe", seed, smoke), goals, configs)
    return grid.storage_url


def report(url: str) -> None:
    store = Store.open(url, create=False)
    best, floor = grid_best(store, "grid")
    grid_trials = launched(store, "grid")
    grid_total = (grid_trials[-1].finished_at - grid_trials[0].started_at).total_seconds()
    grid_s, grid_n = time_to(grid_trials, measured(floor))
    any_s, any_n = in_any_order(grid_trials, floor)
    rows = [("grid", grid_s, grid_n), ("grid, any order", any_s, any_n)]
    goals = {"measured": measured(floor), "found": found(grid_trials, floor)}
    for study in sorted(s.name for s in store.list_studies() if s.name.startswith("tpe-")):
        if any(t.state == "running" for t in store.trials(study)):
            print(f"{study}: left out, its race was cut short (a trial still running)")
            continue
        for how, goal in goals.items():
            rows.append((f"tpe {study[4:]} {how}", *time_to(launched(store, study), goal)))
    print(f"\ngrid best: {best.objective:,.0f} tok/s/GPU, trial {best.number} "
          f"({describe(best.params)}); within its interval: >= {floor:,.0f}; the whole grid "
          f"took {grid_total:,.0f} s for {len(grid_trials)} launches\n")
    print(f"{'study':<20} {'time to best (s)':>17} {'launches':>9} {'/ grid':>7} "
          f"{'/ any order':>12} {'/ whole grid':>13}")
    ratios: dict[str, dict[str, list[float]]] = {how: {"grid": [], "any": [], "whole": []}
                                                 for how in goals}
    for name, seconds, n in rows:
        if seconds is None:
            print(f"{name:<20} {'not reached':>17} {n:>9}")
            if name.startswith("tpe"):  # a seed that never got there counts, as never
                for k in ratios[name.rsplit(" ", 1)[1]].values():
                    k.append(math.inf)
            continue
        cells = {"grid": seconds / grid_s, "any": seconds / any_s, "whole": seconds / grid_total}
        if name.startswith("tpe"):
            for k, v in cells.items():
                ratios[name.rsplit(" ", 1)[1]][k].append(v)
        print(f"{name:<20} {seconds:>17,.0f} {n:>9,.1f} {cells['grid']:>7.2f} "
              f"{cells['any']:>12.2f} {cells['whole']:>13.2f}")
    for how, r in ratios.items():
        if r["grid"]:
            never = sum(math.isinf(v) for v in r["grid"])
            print(f"\nratio of TPE's time to the grid's best ({how}; median of "
                  f"{len(r['grid'])} seeds" + (f", {never} never reaching it" if never else "")
                  + f") over the grid's: {statistics.median(r['grid']):.2f} "
                  f"against its seeded order, {statistics.median(r['any']):.2f} against any "
                  f"order, {statistics.median(r['whole']):.2f} against the whole grid (what a "
                  "grid needs to know its best)")
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="TPE studies, one per seed")
    ap.add_argument("--from", dest="url", help="report a kept run's database, running nothing")
    ap.add_argument("--again", type=Path, metavar="DIR", help="race new TPE studies against the "
                    "grid kept in DIR (a run whose races were cut short)")
    ap.add_argument("--smoke", action="store_true", help="seconds: 3 configurations and one "
                    "TPE seed on the fake engine, in a temporary folder")
    args = ap.parse_args()
    if args.smoke:
        print("smoke: served by the fake engine (tuner.testing.fake_engine), not vLLM: 3 "
              "configurations, one TPE seed", flush=True)
        with tempfile.TemporaryDirectory(prefix="time-to-best-smoke-") as tmp:
            report(run(1, Path(tmp), smoke=True))
        return
    report(args.url or run(args.seeds, args.again))


if __name__ == "__main__":
    main()
