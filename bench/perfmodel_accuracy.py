"""How far the performance model is from published figures: run by hand, prints a table.

    .venv/bin/python -m bench.perfmodel_accuracy [CSV] [--refit]
    .venv/bin/python -m bench.perfmodel_accuracy --study NAME [--storage URL]

The shipped factors (tuner/data/perfmodel_calibration.json) are fitted to the figures of
tuner/data/published.csv published at 1024/1024 only (the calibration rows: the TensorRT-LLM
max-throughput figures and InferenceMAX's 121 configurations of gpt-oss-120b, four metrics
each); every other row is held out. Every row of CSV (default published.csv, or any file with
its columns, InferenceX's reference files included) is listed with the model's prediction and
its relative error:

- a calibration row: leave-one-configuration-out, the factors refitted to every other
  configuration (all metrics of its configuration, and of any figure of the same setup and
  concurrency, held out together);
- a held-out row: the shipped calibration, which never saw it.

Rows the model cannot predict (disaggregated serving, unknown GPU, ...) are listed as skipped
with the reason. Then, per metric group (tok/s per GPU, tok/s per user, TTFT median and p90,
TTFT p99) and for the max-throughput figures, the median and worst absolute error on
calibration rows and on held-out rows apart, and how many fall inside their 80% band (its
width from the calibration's leave-one-out errors). Last, the fitted factors with what each
explains. `--refit` first refits the factors to the calibration rows and rewrites the shipped
calibration file (its bands included).

`--study NAME`: the closed loop on a stored study (`--storage`, default tuner.db): its trials
in order refit the model as they land, and after each, the median error on the trials still to
come.

`--smoke`: the default run with the calibration rows predicted in sample (no refits), in
seconds; it never refits or writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tuner.plan import perfmodel as pm
from tuner.plan.study_fit import write_calibration


def calibration_rows() -> list[pm.Observation]:
    figures, _ = pm.split(pm.read_figures(pm.PUBLISHED_FILE))
    return pm.usable(figures)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="?", type=Path, default=pm.PUBLISHED_FILE)
    parser.add_argument("--refit", action="store_true",
                        help="refit to published.csv's calibration rows and rewrite the shipped "
                             "calibration")
    parser.add_argument("--study", metavar="NAME",
                        help="the closed loop on this stored study instead of published figures")
    parser.add_argument("--storage", metavar="URL", help="with --study: the study's store")
    parser.add_argument("--smoke", action="store_true",
                        help="the default run, calibration rows in sample (seconds); refuses "
                             "--refit, --study and another CSV")
    args = parser.parse_args()
    if args.smoke and (args.refit or args.study or args.csv != pm.PUBLISHED_FILE):
        sys.exit("--smoke: the default run only, with neither --refit, --study nor a CSV")
    if args.study:
        closed_loop(args.study, args.storage)
        return

    fit_set = calibration_rows()
    if args.refit:
        configurations = len({pm.configuration_key(o) for o in fit_set})
        cal = pm.calibrate(fit_set, source=f"{pm.PUBLISHED_FILE.name} ({len(fit_set)} figures "
                           f"of {configurations} configurations at 1024/1024)")
        write_calibration(cal, pm.CALIBRATION_FILE)
        print(f"refitted to {len(fit_set)} calibration rows of {pm.PUBLISHED_FILE}; wrote "
              f"{pm.CALIBRATION_FILE}")
    cal = pm.load_calibration()
    figures = pm.read_figures(args.csv)
    fitting = {_key(o) for o in fit_set}
    rows: list[tuple[pm.Figure, pm.Observation, bool]] = []
    skipped = []
    for fig in figures:
        try:
            o = pm.observation(fig)
        except ValueError as e:
            skipped.append((fig, str(e)))
            continue
        rows.append((fig, o, _key(o) in fitting))
    pred = pm.predict_observations([o for _, o, _ in rows], cal)
    if not args.smoke:
        pred = held_out_of_the_fit(rows, pred, fit_set, cal)
    err = pred / np.array([o.value for _, o, _ in rows]) - 1 if rows else np.zeros(0)

    print(f"calibration: {cal.source}; rows of {args.csv}: {len(figures)}, modelled "
          f"{len(rows)} ({sum(c for _, _, c in rows)} calibration, "
          f"{sum(not c for _, _, c in rows)} held out), skipped {len(skipped)}\n")
    header = (f"{'model':13} {'engine':6} {'gpu':9} {'par.':8} {'isl/osl':11} {'conc':>4} "
              f"{'metric':22} {'published':>9} {'predicted':>9} {'error':>6}  set")
    print(header)
    print("-" * len(header))
    fit_label = "calibration (in sample)" if args.smoke else "calibration (LOO)"
    for (fig, o, calibrating), p, e in zip(rows, pred, err, strict=True):
        conc = "max" if o.concurrency == pm.MAX else f"{o.concurrency:.0f}"
        lengths = f"{fig.isl}/{fig.osl}" + ("~" if o.setup.spread else "")
        notes = fit_label if calibrating else "held out"
        notes += "".join(f"; {n}" for n in o.notes)
        print(f"{fig.model:13} {fig.engine:6} {fig.gpu:9} {fig.parallelism:8} {lengths:11} "
              f"{conc:>4} {o.metric:22} {_num(o.value):>9} {_num(p):>9} {e:>+6.0%}  {notes}")
    for f, reason in skipped:
        print(f"{f.model:13} {f.engine:6} {f.gpu:9} {f.parallelism[:8]:8} "
              f"{f.isl + '/' + f.osl:11} {f.concurrency:>4} {f.metric:22} {f.value:>9}  "
              f"skipped: {reason}")
    if not rows:
        print("\nno row could be modelled")
        return
    summary(rows, err, cal)
    print("\nfactors (fitted; the rest keep their prior):")
    priors = pm.facts().priors
    for name in pm.relevant_factors(fit_set):
        print(f"  {name:26} {cal[name]:>9.4g}  {' '.join(priors[name].about.split())}")


def _key(o: pm.Observation) -> tuple:
    return (*pm.configuration_key(o), o.metric, o.value)


def held_out_of_the_fit(rows: list[tuple[pm.Figure, pm.Observation, bool]], pred: np.ndarray,
                        fit_set: list[pm.Observation], cal: pm.Calibration) -> np.ndarray:
    """Each calibration row predicted by factors refitted without its configuration."""
    out = pred.copy()
    groups: dict[tuple, list[int]] = {}
    for i, (_, o, calibrating) in enumerate(rows):
        if calibrating:
            groups.setdefault(pm.configuration_key(o), []).append(i)
    for key, members in groups.items():
        rest = [p for p in fit_set if pm.configuration_key(p) != key]
        refit = pm.fit(rest, cal, source="leave-one-configuration-out")
        out[members] = pm.predict_observations([rows[i][1] for i in members], refit)
    return out


def summary(rows: list[tuple[pm.Figure, pm.Observation, bool]], err: np.ndarray,
            cal: pm.Calibration) -> None:
    """Per metric group and set: rows, median and worst |error|, and the share of rows inside
    their 80% band."""
    print(f"\n{'metric':16} {'set':12} {'rows':>4} {'median |err|':>13} {'worst |err|':>12} "
          f"{'in 80% band':>12}")
    sets = (("calibration", True), ("held out", False))
    kinds = [(g, lambda o, g=g: pm.GROUP_OF[o.metric] == g) for g in pm.GROUPS]
    kinds.append(("max throughput", lambda o: o.concurrency == pm.MAX))
    log_err = np.abs(np.log1p(np.maximum(err, -0.999999)))
    for kind, chosen in kinds:
        for label, calibrating in sets:
            picked = [i for i, (_, o, c) in enumerate(rows) if c == calibrating and chosen(o)]
            if not picked:
                print(f"{kind:16} {label:12} {0:>4} {'no rows':>13} {'-':>12} {'-':>12}")
                continue
            e = np.abs(err[picked])
            half = np.array([pm.BAND_Z * pm.sigma(cal, pm.GROUP_OF[rows[i][1].metric])[0]
                             for i in picked])
            inside = float(np.mean(log_err[picked] <= half))
            print(f"{kind:16} {label:12} {len(e):>4} {np.median(e):>13.1%} {np.max(e):>12.1%} "
                  f"{inside:>12.0%}")


def closed_loop(name: str, storage: str | None) -> None:
    """The study's trials refitting the model as they land: after each, the error on the rest."""
    from tuner.plan import study_fit
    from tuner.spec.study_spec import DEFAULT_STORAGE
    from tuner.store import Store

    with Store.open(storage or DEFAULT_STORAGE, create=False) as store:
        study = store.get_study(name)
        if study is None:
            sys.exit(f"no study {name!r} in {storage or DEFAULT_STORAGE}")
        numbered = study_fit.trial_observations(study, store.trials(name))
    start = pm.load_calibration()
    print(f"study {name}: {len({n for n, _ in numbered})} trials with measured levels, "
          f"{len(numbered)} figures; the model starts from {start.source}\n")
    print(f"{'trials landed':>13} {'figures ahead':>13} {'median |err| on the trials ahead':>33}")
    for point in study_fit.closed_loop(numbered, start):
        print(f"{point.landed:>13} {point.observations:>13} {point.median_abs_error:>33.1%}")


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


if __name__ == "__main__":
    main()
