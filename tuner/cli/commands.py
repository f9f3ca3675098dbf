"""The command line: a thin layer over validated specs and the store.

Exit statuses: 0 ok; 2 bad input (a spec, flag, file or database that cannot be used as given);
3 no result (no trial met the SLA); 130 interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tuner.spec.errors import EXIT_INTERRUPTED, BadInput, NoResult, TunerError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Find the fastest way to serve an LLM by launching real serving trials.")
model_app = typer.Typer(no_args_is_help=True, help="Generate models to tune on.")
app.add_typer(model_app, name="model")
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

StorageOpt = Annotated[str | None, typer.Option("--storage", envvar="TUNER_STORAGE",
                                                show_envvar=False, help="Database URL "
                                                "(default: $TUNER_STORAGE, else "
                                                "sqlite:///tuner.db).")]
StudyOpt = Annotated[str | None, typer.Option("--study", help="Study name (default: the only "
                                              "study in the database).")]


def _say(line: str) -> None:
    out.print(line)


@model_app.command("tiny")
def model_tiny(out_dir: Annotated[Path, typer.Option("--out", help="Directory to write.")],
               seed: int = 0) -> None:
    """A tiny gpt-oss (MoE) model with random weights and a local tokenizer; no hub access."""
    from tuner.serve.tiny_model import generate_tiny_gpt_oss

    path = generate_tiny_gpt_oss(out_dir, seed=seed)
    out.print(f"tiny gpt-oss model written to {path}")


@app.command()
def run(
    spec_path: Annotated[Path, typer.Argument(metavar="STUDY.yaml", help="The study spec.")],
    storage: StorageOpt = None,
    n_trials: Annotated[int | None, typer.Option("--n-trials", min=1, help="The study's total "
                        "trial budget (overrides budget.n_trials).")] = None,
    study_name: Annotated[str | None, typer.Option("--study-name", help="Overrides the spec's "
                          "name; the same name resumes a study.")] = None,
    export_dir: Annotated[Path | None, typer.Option("--export-dir", help="Where the best "
                          "configuration is exported (default tuner-exports/STUDY).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the launch plans of "
                       "--n-trials sampled trials (default 5) and start nothing.")] = False,
    gpu: Annotated[str | None, typer.Option("--gpu", help="With --dry-run: plan for this GPU "
                   "type instead of the spec's (H100-SXM, H200, B200, GB200).")] = None,
    engine: Annotated[str | None, typer.Option("--engine", help="With --dry-run: plan for "
                      "this engine instead of the spec's.")] = None,
    warm_start: Annotated[int, typer.Option("--warm-start", min=0, metavar="K", help="Run the "
                          "performance model's top K configurations first, and reject what it "
                          "says cannot fit in memory before launch.")] = 0,
    no_confirm: Annotated[bool, typer.Option("--no-confirm", help="Skip re-running the best "
                          "trials in fresh servers at the end (budget.confirm_top_k).")] = False,
    create_only: Annotated[bool, typer.Option("--create-only", help="Validate everything and "
                           "create the study, run no trial: `tuner worker` processes run it "
                           "(several at once on a PostgreSQL --storage).")] = False,
) -> None:
    """Run (or resume) a tuning study of real serving trials, confirm the best ones in fresh
    servers, then export the winner."""
    from tuner.search.study import prepare, run_study
    from tuner.spec.study_spec import load_spec

    spec = load_spec(spec_path)
    if dry_run:
        _print_dry_run(spec, spec_path, gpu, engine, n_trials or 5)
        return
    if gpu or engine:
        raise BadInput("--gpu and --engine apply to --dry-run; for a real study set "
                       "hardware.gpu_type and engine.name in the spec")
    if create_only:
        if warm_start:
            raise BadInput("--warm-start applies to a study this command runs; with "
                           "--create-only the workers run it: leave --warm-start out")
        _create_only(spec, spec_path, storage, study_name, n_trials)
        return
    ctx = prepare(spec, spec_path, storage_url=storage, study_name=study_name, say=_say)
    run_study(ctx, n_trials or spec.budget.n_trials, warm_start=warm_start)
    if spec.budget.confirm_top_k and not no_confirm:
        _confirm(ctx, spec.budget.confirm_top_k, again=False)
    _finish(ctx, export_dir)


@app.command()
def confirm(
    spec_path: Annotated[Path, typer.Argument(metavar="STUDY.yaml", help="The study's spec.")],
    storage: StorageOpt = None,
    study_name: Annotated[str | None, typer.Option("--study-name", help="Overrides the spec's "
                          "name.")] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many of the best trials to "
                   "re-run.")] = 3,
    again: Annotated[bool, typer.Option("--again", help="Re-run trials confirmed before too.")]
    = False,
    export_dir: Annotated[Path | None, typer.Option("--export-dir", help="Where the winner is "
                          "exported (default tuner-exports/STUDY).")] = None,
) -> None:
    """Re-run the best trials of a study, each in a fresh server; the winner is the best
    confirmed one, exported with both runs."""
    from tuner.search.study import prepare
    from tuner.spec.study_spec import load_spec
    from tuner.store import mask_url

    spec = load_spec(spec_path)
    ctx = prepare(spec, spec_path, storage_url=storage, study_name=study_name, say=_say)
    if ctx.store.get_study(ctx.name) is None:
        raise BadInput(f"study {ctx.name} is not in {mask_url(ctx.storage_url)}: run `tuner run "
                       f"{spec_path}` first, or pass --study-name / --storage")
    _confirm(ctx, top, again=again)
    _finish(ctx, export_dir)


def _confirm(ctx, k: int, *, again: bool) -> None:
    from tuner.search.confirm import confirm_top
    from tuner.search.study import load_or_create_study, recover, sigterm_as_interrupt

    with sigterm_as_interrupt():
        recover(ctx, load_or_create_study(ctx))
        confirm_top(ctx, k, again=again)


def _finish(ctx, export_dir: Path | None) -> None:
    """The study's trials, its winner and the winner's export."""
    from tuner.report.export import best_trial, default_formats, write_export

    study = ctx.store.get_study(ctx.name)
    trials = ctx.store.trials(ctx.name)
    _print_trials(trials)
    best = best_trial(study, trials)
    files = write_export(study, best, export_dir or Path("tuner-exports") / ctx.name,
                         default_formats(study))
    _print_best(study, best, trials)
    out.print(f"exported to {files[0].parent}: " + ", ".join(f.name for f in files))


def _create_only(spec, spec_path: Path, storage: str | None, study_name: str | None,
                 n_trials: int | None) -> None:
    import shlex

    from tuner.search.study import load_or_create_study, prepare
    from tuner.store import mask_url

    if n_trials:  # the stored spec is what workers read: it carries the budget
        spec.budget.n_trials = n_trials
    ctx = prepare(spec, spec_path, storage_url=storage, study_name=study_name, say=_say)
    load_or_create_study(ctx)
    used = ctx.store.budget_used(ctx.name)
    stored = ctx.store.get_study(ctx.name).spec["budget"]["n_trials"]
    out.print(f"study {ctx.name} is ready in {mask_url(ctx.storage_url)} ({used} of {stored} "
              "trials used). Start workers on the nodes with:")
    out.print(f"  tuner worker --study {shlex.quote(ctx.name)} "
              f"--storage {shlex.quote(mask_url(ctx.storage_url))}")
    if mask_url(ctx.storage_url) != ctx.storage_url:
        out.print("(password masked: pass the full URL, or set TUNER_STORAGE to it and leave "
                  "--storage out)")


@app.command()
def worker(
    storage: StorageOpt = None,
    study: StudyOpt = None,
    devices: Annotated[str | None, typer.Option("--devices", metavar="IDS", help="The devices "
                       "this worker owns, e.g. 0,1,2,3 (GPU indices; CPU cores on a CPU node). "
                       "Default: every device of the study's type on this node.")] = None,
) -> None:
    """Join an existing study and run its trials until its budget is spent; several workers
    (on several nodes) share one study through a PostgreSQL --storage."""
    from tuner.search.study import prepare_worker, run_study
    from tuner.spec.study_spec import DEFAULT_STORAGE

    owned = _device_ids(devices) if devices is not None else None
    ctx = prepare_worker(storage or DEFAULT_STORAGE, study, say=_say, devices=owned)
    run_study(ctx, ctx.spec.budget.n_trials)
    trials = ctx.store.trials(ctx.name)
    _print_trials(trials)
    used = ctx.store.budget_used(ctx.name)
    out.print(f"worker done: study {ctx.name} has used {used} of {ctx.spec.budget.n_trials} "
              "trials; `tuner best` and `tuner export` read the result")


def _device_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        ids = []
    if not ids or any(i < 0 for i in ids):
        raise BadInput(f"--devices {text}: give device indices separated by commas, e.g. 0,1")
    return ids


def _print_dry_run(spec, spec_path: Path, gpu: str | None, engine: str | None, n: int) -> None:
    from tuner.plan.dry_run import dry_run
    from tuner.report.export import shell_command
    from tuner.spec.space import describe

    header, planned = dry_run(spec, spec_path, gpu=gpu, engine=engine, n_trials=n)
    out.print(header)
    for t in planned:
        out.print(f"\ntrial {t.number}  {describe(t.params)}")
        if t.plan is None:
            out.print(f"  infeasible: {t.infeasible}")
            continue
        out.print(f"  $ {shell_command(t.plan.argv, t.plan.env)}")
        for name, content in t.plan.files.items():
            out.print(f"  {name}:")
            for line in content.rstrip().splitlines():
                out.print(f"    {line}")


def _open(storage: str | None):
    from tuner.spec.study_spec import DEFAULT_STORAGE
    from tuner.store import Store, StoreError

    try:
        return Store.open(storage or DEFAULT_STORAGE, create=False)
    except StoreError as e:
        raise BadInput(str(e)) from e


def _pick_study(store, name: str | None):
    studies = store.list_studies()
    if name is not None:
        found = store.get_study(name)
        if found is None:
            names = ", ".join(s.name for s in studies) or "none"
            raise BadInput(f"--study {name}: no such study in this database (studies: {names})")
        return found
    if not studies:
        raise NoResult("the database holds no study yet: run `tuner run STUDY.yaml` first")
    if len(studies) > 1:
        names = ", ".join(s.name for s in studies)
        raise BadInput(f"the database holds several studies ({names}): choose one with --study")
    return studies[0]


def _table(frame, width: int = 70) -> str:
    """A frame as text: numbers with thousands separators, '-' for missing, long text cut."""
    def cell(v):
        if v is None or (isinstance(v, float) and v != v):
            return "-"
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) < 100 else f"{v:,.0f}"
        text = str(v)
        return text if len(text) <= width else text[: width - 1] + "…"

    return frame.astype(object).map(cell).to_string(index=False)


def _print_trials(trials) -> None:
    from tuner.report.tables import trials_frame

    frame = trials_frame(trials)
    out.print(_table(frame) if not frame.empty else "no trials yet")


def _print_best(study, best, trials) -> None:
    from tuner.report.export import is_confirmed
    from tuner.report.tables import measurements_frame
    from tuner.spec.space import describe

    out.print(f"\nbest of study {study.name}: trial {best.number}  {describe(best.params)}")
    out.print(f"  {best.objective:,.0f} output tok/s per GPU (SLA met), engine "
              f"{study.engine} {best.engine_version or ''}".rstrip())
    out.print(_table(measurements_frame(best.measurements)))
    if best.confirm_state is None:
        out.print("  not confirmed: `tuner confirm STUDY.yaml` re-runs the best trials in fresh "
                  "servers")
        return
    again = ("" if best.confirm_objective is None
             else f", {best.confirm_objective:,.0f} tok/s/GPU")
    out.print(f"  confirmation in a fresh server: {best.confirm_state}{again}"
              + (f" ({best.confirm_reason})" if best.confirm_reason else ""))
    out.print(_table(measurements_frame(best.confirmation)))
    higher = [t.number for t in trials if t.state == "complete" and t.meets_sla
              and t.confirm_state is None and (t.objective or 0) > (best.confirm_objective or 0)]
    if is_confirmed(best) and higher:
        out.print(f"  unconfirmed trial(s) {', '.join(map(str, higher))} measured higher once: "
                  "`tuner confirm` re-runs them")


@app.command()
def gpus(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable.")] = False,
) -> None:
    """This node's NVIDIA GPUs (NVML): model, count, memory, driver and NVLink; exits 4
    where NVML is not available."""
    import json

    from tuner.serve.nvml import describe, read_gpus

    inv = read_gpus()
    if as_json:
        out.print(json.dumps(inv.to_dict(), indent=2))
        return
    for line in describe(inv):
        out.print(line)


@app.command()
def status(storage: StorageOpt = None, study: StudyOpt = None) -> None:
    """Studies in the database; with --study (or a single study), its trials."""
    from tuner.report.tables import studies_frame

    store = _open(storage)
    studies = store.list_studies()
    if study is None and len(studies) != 1:
        if not studies:
            out.print("the database holds no study yet")
            return
        out.print(_table(studies_frame(studies, store.trials)))
        return
    chosen = _pick_study(store, study)
    out.print(_table(studies_frame([chosen], store.trials)))
    out.print("")
    _print_trials(store.trials(chosen.name))


@app.command()
def best(storage: StorageOpt = None, study: StudyOpt = None) -> None:
    """The best trial that met the SLA; exits 3 when there is none."""
    from tuner.report.export import best_trial

    store = _open(storage)
    chosen = _pick_study(store, study)
    trials = store.trials(chosen.name)
    _print_best(chosen, best_trial(chosen, trials), trials)


@app.command()
def export(
    storage: StorageOpt = None,
    study: StudyOpt = None,
    fmt: Annotated[list[str] | None, typer.Option("--format", help="the study's engine (vllm: "
                   "config.yaml + launch.sh), json (best.json), k8s (k8s.yaml) or k8s-workers "
                   "(k8s-workers.yaml: a Job of --workers `tuner worker` pods on this study); "
                   "repeat for several. Default: the engine's files and json.")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Directory (default "
                       "tuner-exports/STUDY).")] = None,
    trial: Annotated[int | None, typer.Option("--trial", help="Export this trial instead of "
                     "the best.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="With --format "
                       "k8s-workers: how many worker pods.")] = 2,
    image: Annotated[str | None, typer.Option("--image", help="With --format k8s-workers: "
                     "the workers' image (tuner and the engine installed).")] = None,
    secret: Annotated[str, typer.Option("--secret", help="With --format k8s-workers: the "
                      "Secret whose key `url` holds the storage URL.")] = "tuner-storage",
) -> None:
    """Export the best configuration (or --trial N) as files a deploy runs as-is."""
    from tuner.report.export import WORKERS_FORMAT, best_trial, default_formats, write_export

    store = _open(storage)
    chosen = _pick_study(store, study)
    directory = out_dir or Path("tuner-exports") / chosen.name
    if fmt and WORKERS_FORMAT in fmt:
        from tuner.report.export import write_workers_job

        out.print(str(write_workers_job(chosen, directory, workers=workers, image=image,
                                        secret=secret)))
        fmt = [f for f in fmt if f != WORKERS_FORMAT]
        if not fmt:
            return
    trials = store.trials(chosen.name)
    if trial is None:
        picked = best_trial(chosen, trials)
    else:
        picked = next((t for t in trials if t.number == trial and t.state == "complete"), None)
        if picked is None:
            raise BadInput(f"--trial {trial}: no complete trial with that number in study "
                           f"{chosen.name}")
    files = write_export(chosen, picked, directory, tuple(fmt or default_formats(chosen)))
    for f in files:
        out.print(str(f))


@app.command()
def dashboard(
    storage: StorageOpt = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to serve on.")]
    = 8501,
    address: Annotated[str, typer.Option("--address", help="Address to listen on; 0.0.0.0 "
                       "to reach it from other machines.")] = "127.0.0.1",
) -> None:
    """Serve the dashboard (Streamlit) on the study database, read-only; Ctrl-C stops it."""
    import os
    import signal
    import socket
    import subprocess

    from tuner.report.dashboard_data import STORAGE_ENV
    from tuner.spec.study_spec import DEFAULT_STORAGE
    from tuner.store import mask_url

    url = storage or DEFAULT_STORAGE
    _open(url).close()  # a missing or foreign database: the store's one-line error, exit 2
    app_path = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
    if not app_path.is_file():
        raise BadInput(f"the dashboard's app is missing ({app_path}): reinstall tuner from its "
                       "source tree (`make install`)")
    try:
        import streamlit  # noqa: F401
    except ImportError as e:
        raise BadInput("the dashboard needs Streamlit: pip install 'tuner[dashboard]' "
                       "(`make install` does)") from e
    with socket.socket() as s:
        # As the server will: a port left in TIME_WAIT by a stopped dashboard is reusable.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as e:
            raise BadInput(f"--port {port} on {address} cannot be used ({e.strerror}): stop "
                           "what holds it or pass another --port") from e
    command = [sys.executable, "-m", "streamlit", "run", str(app_path),
               "--server.headless", "true", "--server.address", address,
               "--server.port", str(port), "--server.fileWatcherType", "none",
               "--server.runOnSave", "false", "--browser.gatherUsageStats", "false",
               "--client.toolbarMode", "minimal", "--theme.base", "light"]
    # The URL travels in the environment: no shell quoting, and no password in `ps` output.
    env = {**os.environ, STORAGE_ENV: url}
    out.print(f"tuner dashboard: http://{address}:{port}  (reading {mask_url(url)}; Ctrl-C "
              "stops it)")
    proc = subprocess.Popen(command, env=env)
    # A SIGTERM to tuner (a supervisor, `kill`) stops the server too instead of orphaning it.
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        code = proc.wait()
    except KeyboardInterrupt:  # the terminal's Ctrl-C reached Streamlit too: let it finish
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait()
        raise typer.Exit(0) from None
    if code not in (0, -signal.SIGTERM):
        raise BadInput(f"the dashboard server stopped with status {code}: see its output above")


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
    calibrate: Annotated[str | None, typer.Option("--calibrate", metavar="STUDY", help="Refit "
                         "the model to this stored study's measurements and report the error "
                         "before and after.")] = None,
    out_path: Annotated[Path | None, typer.Option("--out", help="With --calibrate: where the "
                        "refit factors go (default perfmodel-calibration-STUDY.json).")] = None,
) -> None:
    """Predict every configuration of the spec's search space with the performance model:
    what cannot fit and why, the Pareto front and the top candidates. Nothing is launched."""
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
    result = planner.make_plan(target, start)
    elapsed = time.perf_counter() - t0
    out.print(f"plan of {result.name}: {result.engine} on {target.inventory.description}, space "
              f"{result.space.name}, ISL {result.isl} / OSL {result.osl}; calibration "
              f"{start.source}; {elapsed:.1f} s; nothing is launched")
    for line in planner.summary_lines(result):
        out.print(line)
    out.print("\npredicted Pareto front (tok/s per GPU vs tok/s per user):")
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


def _store(url: str):
    from tuner.store import Store, StoreError

    try:
        return Store.open(url)
    except StoreError as e:
        raise BadInput(str(e)) from e


def _refit(name: str, storage: str | None, start, out_path: Path | None) -> None:
    import numpy as np

    from tuner.plan import planner

    store = _open(storage)
    chosen = _pick_study(store, name)
    obs = planner.study_observations(chosen, store.trials(chosen.name))
    result = planner.refit(obs, start, source=f"study {chosen.name}")
    path = out_path or Path(f"perfmodel-calibration-{chosen.name}.json")
    planner.write_calibration(result.calibration, path)

    def err(e) -> str:
        return f"median {np.median(np.abs(e)):.1%}, worst {np.max(np.abs(e)):.1%}"

    out.print(f"refit to study {chosen.name}: {len(obs)} measured levels")
    out.print(f"  error before ({start.source}): {err(result.before)}")
    out.print(f"  error after: {err(result.after)}")
    for k, v in result.calibration.factors.items():
        if abs(v - start[k]) > 1e-3 * abs(start[k]):
            out.print(f"  {k}: {start[k]:.4g} -> {v:.4g}")
    out.print(f"written to {path}; use it with `tuner plan STUDY.yaml --calibration {path}`")


def main() -> None:
    try:
        app(standalone_mode=False)
    except TunerError as e:
        err.print(f"error: {e}")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted: the running trial was stopped and recorded as failed")
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors come through here in standalone_mode=False
        import click

        if isinstance(e, click.exceptions.ClickException):
            err.print(f"error: {e.format_message()}")
            sys.exit(2)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(EXIT_INTERRUPTED)
        raise


if __name__ == "__main__":
    main()
