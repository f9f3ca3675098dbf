"""Running a study: `tuner run` (also --create-only and --dry-run), `tuner confirm` and
`tuner worker`."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import StorageOpt, StudyOpt, _open, _print_best, _print_trials, _say, app, out
from tuner.spec.errors import BadInput
from tuner.spec.names import folder_of


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
    wait: Annotated[bool, typer.Option("--wait", help="Where another study is measuring on "
                    "this machine's devices, wait for it instead of running beside it.")] = False,
) -> None:
    """Run (or resume) a tuning study of real serving trials, confirm the best ones in fresh
    servers, then export the winner."""
    from tuner.search.context import prepare
    from tuner.search.loop import run_study
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
    out.for_study(spec.hardware.gpu_type)  # figures per core on a CPU node
    ctx = prepare(spec, spec_path, storage_url=storage, study_name=study_name, say=_say)
    warm = None
    if warm_start:
        from tuner.plan.planner import warm_start as model_warm_start

        warm = model_warm_start(ctx, warm_start, store=ctx.store, study_name=ctx.name)
    with _measuring(ctx, wait):
        # The study's time limit covers its trials and the head-to-head after them (a wait for
        # another study is not in it).
        limit = spec.budget.timeout_min
        ends = time.monotonic() + limit * 60 if limit else None
        finalists = 0 if no_confirm else spec.budget.confirm_top_k
        run_study(ctx, n_trials or spec.budget.n_trials, warm_start=warm, ends=ends,
                  finalists=finalists)
        if finalists:
            _confirm(ctx, finalists, again=False, ends=ends)
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
    wait: Annotated[bool, typer.Option("--wait", help="Where another study is measuring on "
                    "this machine's devices, wait for it instead of running beside it.")] = False,
) -> None:
    """Re-run the best trials of a study, each in a fresh server; the winner is the best
    confirmed one, exported with both runs."""
    from tuner.search.context import prepare
    from tuner.spec.study_spec import DEFAULT_STORAGE, load_spec
    from tuner.store import mask_url

    spec = load_spec(spec_path)
    # The study must exist already: looked up without creating a database where none is.
    url, name = storage or spec.storage or DEFAULT_STORAGE, study_name or spec.name
    with _open(url) as store:
        if store.get_study(name) is None:
            raise BadInput(f"study {name} is not in {mask_url(url)}: run `tuner run "
                           f"{shlex.quote(str(spec_path))}` first, or pass --study-name / "
                           "--storage")
    out.for_study(spec.hardware.gpu_type)  # figures per core on a CPU node
    ctx = prepare(spec, spec_path, storage_url=storage, study_name=study_name, say=_say)
    with _measuring(ctx, wait):
        _confirm(ctx, top, again=again)
    _finish(ctx, export_dir)


def _measuring(ctx, wait: bool):
    """This machine's devices held for the study's measurements, or said to be busy."""
    from tuner.serve.device_locks import measuring_on

    return measuring_on(ctx.inventory.kind, ctx.inventory.devices, f"tuner study {ctx.name}",
                        wait=wait, say=_say)


def _confirm(ctx, k: int, *, again: bool, ends: float | None = None) -> None:
    from tuner.search.bridge import load_or_create_study
    from tuner.search.confirm import confirm_top
    from tuner.search.loop import stop_signals_as_interrupt
    from tuner.search.recovery import recover

    with stop_signals_as_interrupt(ctx.stop):
        recover(ctx, load_or_create_study(ctx))
        confirm_top(ctx, k, again=again, ends=ends)


def _finish(ctx, export_dir: Path | None) -> None:
    """The study's trials, its winner and the winner's export."""
    from tuner.report.export import default_formats, write_export
    from tuner.verdict.rules import winner

    study = ctx.store.get_study(ctx.name)
    trials = ctx.store.trials(ctx.name)
    _print_trials(trials, study)
    best = winner(study, trials)
    files = write_export(study, best, export_dir or folder_of(Path("tuner-exports"), ctx.name),
                         default_formats(study))
    _print_best(study, best, trials)
    out.print(f"exported to {files[0].parent}: " + ", ".join(f.name for f in files))


def _create_only(spec, spec_path: Path, storage: str | None, study_name: str | None,
                 n_trials: int | None) -> None:
    from tuner.search.bridge import load_or_create_study
    from tuner.search.context import prepare
    from tuner.store import mask_url

    if n_trials:  # the stored spec is what workers read: it carries the budget
        spec.budget.n_trials = n_trials
    out.for_study(spec.hardware.gpu_type)  # figures per core on a CPU node
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
    wait: Annotated[bool, typer.Option("--wait", help="Where another study is measuring on "
                    "this machine's devices, wait for it instead of running beside it.")] = False,
) -> None:
    """Join an existing study and run its trials until its budget is spent; several workers
    (on several nodes) share one study through a PostgreSQL --storage."""
    from tuner.search.context import prepare_worker
    from tuner.search.loop import run_study
    from tuner.spec.study_spec import DEFAULT_STORAGE

    owned = _device_ids(devices) if devices is not None else None
    ctx = prepare_worker(storage or DEFAULT_STORAGE, study, say=_say, devices=owned)
    with _measuring(ctx, wait):
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
        for i, replica in enumerate(t.replicas, start=1):
            out.print(f"  replica {i}: $ {shell_command(replica.argv, replica.env)}")
        if t.router:
            out.print(f"  router in front: $ {shlex.join(t.router)}")
        else:
            out.print(f"  $ {shell_command(t.plan.argv, t.plan.env)}")
        for name, content in t.plan.files.items():
            out.print(f"  {name}:")
            for line in content.rstrip().splitlines():
                out.print(f"    {line}")
