"""`tuner plan`: the performance model's predictions for a spec's search space, and
`--calibrate`'s refit of the model to a stored study."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import StorageOpt, _open, _pick_study, _store, _table, app, out
from tuner.spec.errors import BadInput


@app.command()
def plan(
    spec_path: Annotated[Path | None, typer.Argument(metavar="STUDY.yaml", help="The study "
                         "spec (not with --calibrate).")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="Plan for this GPU type instead of "
                   "the spec's (H100-SXM, H200, B200, GB200).")] = None,
    engine: Annotated[str | None, typer.Option("--engine", help="Plan for this engine instead "
                      "of the spec's.")] = None,
    export_path: Annotated[Path | None, typer.Option("--export", metavar="PATH", help="Write "
                           "every prediction to PATH (.csv or .json).")] = None,
    storage: StorageOpt = None,
    study: Annotated[str | None, typer.Option("--study", help="Store the predictions under "
                     "this study name (default: the spec's name) in --storage.")] = None,
    top: Annotated[int, typer.Option("--top", min=0, help="Candidates to list.")] = 10,
    calibration: Annotated[Path | None, typer.Option("--calibration", help="Fitted factors to "
                           "use (default: the shipped fit to published figures).")] = None,
    acceptance: Annotated[float | None, typer.Option("--acceptance", min=0.0, max=1.0,
                          help="Speculative decoding's draft acceptance rate (accepted / "
                          "proposed draft tokens, as vLLM's metrics count it) for every "
                          "speculative configuration, instead of the fitted one.")] = None,
    calibrate: Annotated[str | None, typer.Option("--calibrate", metavar="STUDY", help="Refit "
                         "the model to this stored study's measurements and report the error "
                         "before and after, and on each trial held out of the fit.")] = None,
    out_path: Annotated[Path | None, typer.Option("--out", help="With --calibrate: where the "
                        "refit factors go (default perfmodel-calibration-STUDY.json).")] = None,
) -> None:
    """Predict every configuration of the spec's search space with the performance model:
    what cannot fit and why, the Pareto front and the top candidates, each with its 80% band.
    Nothing is launched."""
    import time

    from tuner.plan import perfmodel, planner

    start = perfmodel.load_calibration(calibration)
    if calibrate is not None:
        if spec_path is not None:
            raise BadInput("--calibrate STUDY reads the stored study; give no STUDY.yaml")
        _refit(calibrate, storage, start, out_path)
        return
    if spec_path is None:
        raise BadInput("give a STUDY.yaml to plan, or --calibrate STUDY")
    from tuner.plan.dry_run import offline_study
    from tuner.spec.study_spec import DEFAULT_STORAGE, load_spec

    spec = load_spec(spec_path)
    t0 = time.perf_counter()
    target = offline_study(spec, spec_path, gpu=gpu, engine=engine)
    result = planner.make_plan(target, start, acceptance=acceptance)
    elapsed = time.perf_counter() - t0
    out.print(f"plan of {result.name}: {result.engine} on {target.inventory.description}, space "
              f"{result.space.name}, ISL {result.isl} / OSL {result.osl}; calibration "
              f"{start.source}; {elapsed:.1f} s; nothing is launched")
    for line in planner.summary_lines(result):
        out.print(line)
    out.print("\npredicted Pareto front (tok/s per GPU vs tok/s per user; 80% bands):")
    out.print(_table(planner.front_frame(result), width=90))
    if top:
        frame = planner.top_frame(result, top)
        out.print(f"\ntop {len(frame)} candidates (the study's objective: best tok/s per GPU "
                  "among levels predicted to meet the SLA; identical predictions listed once):")
        out.print(_table(frame, width=90) if not frame.empty else "none is predicted to meet "
                  "the SLA")
    if export_path is not None:
        n = planner.export(result, export_path)
        out.print(f"\nexported {n:,} rows to {export_path}")
    if storage or study:
        with _store(storage or DEFAULT_STORAGE) as store:
            n = planner.save(result, store, study or spec.name)
        out.print(f"stored {n:,} predictions (source {planner.SOURCE}) under study "
                  f"{study or spec.name}")



def _refit(name: str, storage: str | None, start, out_path: Path | None) -> None:
    import numpy as np

    from tuner.plan import study_fit

    store = _open(storage)
    chosen = _pick_study(store, name)
    numbered = study_fit.trial_observations(chosen, store.trials(chosen.name))
    result = study_fit.refit(numbered, start, source=f"study {chosen.name}")
    path = out_path or Path(f"perfmodel-calibration-{chosen.name}.json")
    study_fit.write_calibration(result.calibration, path)

    def err(e) -> str:
        if not len(e):
            return "none"
        return f"median {np.median(np.abs(e)):.1%}, worst {np.max(np.abs(e)):.1%}"

    out.print(f"refit to study {chosen.name}: {len(result.observations)} measured figures")
    out.print(f"  error before ({start.source}): {err(result.before)}")
    out.print(f"  error after: {err(result.after)}")
    if result.held_out_trials:
        out.print(f"  held-out trials ({result.held_out_trials}, each refitted without it): "
                  f"before {err(result.held_out_before)}; after {err(result.held_out_after)}")
    for method, rate in study_fit.measured_acceptance(result.observations).items():
        out.print(f"  measured {method} acceptance rate {rate:.0%} (used as measured, not "
                  "fitted)")
    for line in study_fit.factor_lines(start, result.calibration):
        out.print(f"  {line}")
    out.print(f"written to {path}; use it with `tuner plan STUDY.yaml --calibration "
              f"{shlex.quote(str(path))}`")
