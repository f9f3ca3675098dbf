"""Time to the best configuration: a grid study and TPE studies of the same tiny CPU space, real
vLLM trials, one run. Run by hand (about 30 minutes on a 2-core machine):

    .venv/bin/python bench/time_to_best.py [--seeds 2]

The space (bench/time_to_best_space.yaml) has 12 configurations, all of which launch; the study is
the README demo's (examples/tiny-moe-cpu.yaml: its engine, workload and SLA) with that space, no
confirmations and no time limit. First a grid study (`sampler: grid`) measures every
configuration once; its best is the trial with the highest objective among those that met the
SLA, and "within the grid best's interval" means an objective that met the SLA and is at least
the best's objective minus the 95% half-width of its level's output tok/s per GPU. Then one TPE
study per seed runs until its first such trial (at most 12 launches).

Each study's time to best is the wall time from its first server start to the end of its first
trial within that interval, and its launches the servers started until then; the grid's figures
are its own time to such a trial in its (seeded) order. The ratio is TPE's time over the grid's.

Not measured: a warm-started TPE. The performance model that warm-starts a study has datasheet
figures for GPU types only, so on this machine there is no model to warm-start from.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tuner.search.context import StudyContext, prepare  # noqa: E402
from tuner.search.loop import run_study  # noqa: E402
from tuner.search.rules import best_level, counts_toward_budget, met_sla, study_sla  # noqa: E402
from tuner.spec.study_spec import load_spec  # noqa: E402
from tuner.store import TrialRecord  # noqa: E402

SPACE = REPO / "bench" / "time_to_best_space.yaml"
CONFIGS = 12


def study_spec(folder: Path, name: str, sampler: str, seed: int) -> Path:
    spec = yaml.safe_load((REPO / "examples" / "tiny-moe-cpu.yaml").read_text())
    spec.update(name=name, search_space=str(SPACE), storage=f"sqlite:///{folder / 'tuner.db'}",
                runs_dir=str(folder / "runs"))
    spec["sampler"] = {"name": sampler, "seed": seed, "n_startup_trials": 3}
    spec["budget"] = {**spec["budget"], "n_trials": CONFIGS, "timeout_min": None,
                      "confirm_top_k": 0}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def context(folder: Path, name: str, sampler: str, seed: int) -> StudyContext:
    path = study_spec(folder, name, sampler, seed)
    return prepare(load_spec(path), path, storage_url=None, study_name=None,
                   say=lambda line: print(f"  [{name}] {line}", flush=True))


def launched(ctx: StudyContext) -> list[TrialRecord]:
    """The trials that started a server and reached a verdict (pruned ones included: the
    budget's rule), in start order."""
    trials = [t for t in ctx.store.trials(ctx.name)
              if t.state != "running" and counts_toward_budget(t.state, t.failure_kind)]
    return sorted(trials, key=lambda t: t.started_at)


def within(trial: TrialRecord, floor: float) -> bool:
    return met_sla(trial) and trial.objective >= floor


def time_to(trials: list[TrialRecord], floor: float) -> tuple[float | None, int]:
    """Wall seconds from the first start to the end of the first trial within `floor`, and the
    servers launched until then (all of them when none got there)."""
    for i, t in enumerate(trials):
        if within(t, floor):
            return (t.finished_at - trials[0].started_at).total_seconds(), i + 1
    return None, len(trials)


def grid_best(ctx: StudyContext) -> tuple[TrialRecord, float]:
    """The grid's best trial and the floor of its interval (objective minus half-width)."""
    ok = [t for t in launched(ctx) if met_sla(t)]
    if not ok:
        sys.exit("no configuration of the grid met the SLA: nothing to race towards")
    best = max(ok, key=lambda t: t.objective)
    level, _ = best_level(best.measurements, study_sla(ctx.store.get_study(ctx.name)))
    half = (level.output_tok_s_ci95 or 0.0) * level.output_tok_s_per_gpu / level.output_tok_s
    return best, best.objective - half


def race(ctx: StudyContext, floor: float) -> None:
    """Run the study until its first trial within `floor` (the loop is stopped then)."""
    done, reached = threading.Event(), threading.Event()

    def watch() -> None:
        while not done.wait(2.0):
            if any(within(t, floor) for t in launched(ctx)):
                reached.set()
                ctx.stop.set()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run_study(ctx, CONFIGS)
    except KeyboardInterrupt:
        if not reached.is_set():  # Ctrl-C or SIGTERM, not the watcher: stop the bench
            raise
    finally:
        done.set()
        watcher.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2, help="TPE studies, one per seed")
    args = ap.parse_args()
    rows = []
    # Kept, so the figures can be read again from its database (`tuner status --storage`).
    folder = Path(tempfile.mkdtemp(prefix="time-to-best-"))
    print(f"studies in {folder / 'tuner.db'}", flush=True)
    grid = context(folder, "grid", "grid", 0)
    run_study(grid, CONFIGS)
    best, floor = grid_best(grid)
    grid_trials = launched(grid)
    grid_total = (grid_trials[-1].finished_at - grid_trials[0].started_at).total_seconds()
    grid_s, grid_n = time_to(grid_trials, floor)
    rows.append(("grid", grid_s, grid_n))
    for seed in range(args.seeds):
        tpe = context(folder, f"tpe-{seed}", "tpe", seed)
        race(tpe, floor)
        rows.append((f"tpe seed {seed}", *time_to(launched(tpe), floor)))
    print(f"\ngrid best: {best.objective:,.0f} tok/s/GPU ({best.params}); within its interval: "
          f">= {floor:,.0f}; the whole grid took {grid_total:,.0f} s for {len(grid_trials)} "
          "launches\n")
    print(f"{'study':<14} {'time to best (s)':>17} {'launches':>9} {'ratio to grid':>14} "
          f"{'to whole grid':>14}")
    ratios, wholes = [], []
    for name, seconds, n in rows:
        ratio = None if seconds is None or not grid_s else seconds / grid_s
        if ratio is not None and name != "grid":
            ratios.append(ratio)
        shown = "not reached" if seconds is None else f"{seconds:,.0f}"
        whole = "-" if seconds is None else f"{seconds / grid_total:.2f}"
        if seconds is not None and name != "grid":
            wholes.append(seconds / grid_total)
        print(f"{name:<14} {shown:>17} {n:>9} {'-' if ratio is None else f'{ratio:.2f}':>14} "
              f"{whole:>14}")
    if ratios:
        print(f"\nratio of TPE's time to the grid's best over the grid's own time to it, median "
              f"over {len(ratios)} seed(s): {statistics.median(ratios):.2f}; over the whole "
              f"grid (what a grid needs to know its best): {statistics.median(wholes):.2f}")


if __name__ == "__main__":
    main()
