"""Reading a study's results: `tuner status`, `tuner best` and `tuner export`; and `tuner upgrade`,
the one command that migrates an existing database and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import (
    StorageOpt,
    StudyOpt,
    _open,
    _pick_study,
    _print_best,
    _print_cost,
    _print_trials,
    _table,
    app,
    out,
)
from tuner.spec.errors import BadInput
from tuner.spec.names import folder_of


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
    out.for_study(chosen.gpu_type)
    out.print(_table(studies_frame([chosen], store.trials)))
    out.print("")
    _print_trials(store.trials(chosen.name), chosen)


MinUserOpt = Annotated[float | None, typer.Option(
    "--min-tok-s-per-user", min=0.0, metavar="X", help="Pick from the front of output tok/s "
    "per GPU against per-user tok/s (p90): the configuration and load with the most tok/s per "
    "GPU among the measured levels that met the SLA and reach X tok/s per user.")]


@app.command()
def best(storage: StorageOpt = None, study: StudyOpt = None,
         min_tok_s_per_user: MinUserOpt = None) -> None:
    """The best trial that met the SLA (or, with --min-tok-s-per-user, the front's pick for
    that target); exits 3 when there is none."""
    from tuner.verdict.rules import pick_for_user, winner

    store = _open(storage)
    chosen = _pick_study(store, study)
    trials = store.trials(chosen.name)
    if min_tok_s_per_user is None:
        _print_best(chosen, winner(chosen, trials), trials)
        return
    trial, level = pick_for_user(chosen, trials, min_tok_s_per_user)
    _print_pick(chosen, trial, level, min_tok_s_per_user)


def _print_pick(study, trial, level, target: float) -> None:
    from tuner.report.tables import trial_measurements_frame
    from tuner.spec.space import describe
    from tuner.verdict.cost import level_usd_per_mtok

    out.print(f"\nfor at least {target:g} tok/s per user: trial {trial.number}  "
              f"{describe(trial.params)}")
    out.print(f"  at c={level.concurrency}: {level.output_tok_s_per_gpu:,.0f} output tok/s per "
              f"GPU, per-user p90 {level.tok_s_per_user_p90:,.1f} tok/s (SLA met)")
    _print_cost(study, trial, level_usd_per_mtok(study, trial, level))
    out.print(_table(trial_measurements_frame(study, trial)))


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
    router_image: Annotated[str | None, typer.Option("--router-image", help="With --format "
                            "k8s of a trial of replicas: the router's image (vllm-router "
                            "installed).")] = None,
    min_tok_s_per_user: MinUserOpt = None,
) -> None:
    """Export the best configuration (or --trial N, or the front's pick for
    --min-tok-s-per-user X) as files a deploy runs as-is."""
    from tuner.report.export import WORKERS_FORMAT, Pick, default_formats, write_export
    from tuner.verdict.rules import pick_for_user, winner

    store = _open(storage)
    chosen = _pick_study(store, study)
    directory = out_dir or folder_of(Path("tuner-exports"), chosen.name)
    if fmt and WORKERS_FORMAT in fmt:
        from tuner.report.export import write_workers_job

        out.print(str(write_workers_job(chosen, directory, workers=workers, image=image,
                                        secret=secret)))
        fmt = [f for f in fmt if f != WORKERS_FORMAT]
        if not fmt:
            return
    trials = store.trials(chosen.name)
    pick = None
    if trial is not None and min_tok_s_per_user is not None:
        raise BadInput("--trial and --min-tok-s-per-user both choose what to export: pass one")
    if min_tok_s_per_user is not None:
        picked, level = pick_for_user(chosen, trials, min_tok_s_per_user)
        pick = Pick(level, min_tok_s_per_user)
    elif trial is None:
        picked = winner(chosen, trials)
    else:
        # A quality failure is refused by the export itself, with the gate's reason.
        picked = next((t for t in trials if t.number == trial and (
            t.state == "complete" or t.failure_kind == "quality")), None)
        if picked is None:
            raise BadInput(f"--trial {trial}: no complete trial with that number in study "
                           f"{chosen.name}")
    files = write_export(chosen, picked, directory, tuple(fmt or default_formats(chosen)), pick,
                         router_image)
    for f in files:
        out.print(str(f))


@app.command()
def upgrade(storage: StorageOpt = None) -> None:
    """Bring a study database made by an older tuner up to this tuner's schema (the readers,
    `tuner status` and the dashboard among them, never change a database themselves)."""
    from tuner.spec.study_spec import DEFAULT_STORAGE
    from tuner.store import Store, StoreError

    url = storage or DEFAULT_STORAGE
    try:
        store = Store.open(url, create=False, upgrade=True)
    except StoreError as e:
        raise BadInput(str(e)) from e
    with store:
        out.print(f"{store.where} is up to date")
