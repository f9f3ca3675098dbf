"""How far the performance model is from published figures: run by hand, prints a table.

    .venv/bin/python bench/perfmodel_accuracy.py [CSV] [--refit]

Every row of CSV (default tuner/data/published.csv, or any file with the same columns) is listed:
the model's prediction with the shipped calibration (tuner/data/perfmodel_calibration.json)
against the published value, and the relative error. Rows the model cannot predict are listed as
skipped with the reason. Two errors are given, because the shipped factors were fitted to
published.csv itself:

- `fit`: the shipped calibration. For a row of published.csv this is an in-sample error.
- `LOO`: leave-one-out. For a row of published.csv, the factors are refitted to every other
  published row and then predict this one; for any other row it equals `fit` (it was never
  fitted to).

`--refit` first refits the factors to published.csv and rewrites the shipped calibration file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuner.plan import perfmodel as pm  # noqa: E402
from tuner.plan.planner import write_calibration  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="?", type=Path, default=pm.PUBLISHED_FILE)
    parser.add_argument("--refit", action="store_true",
                        help="refit to published.csv and rewrite the shipped calibration")
    args = parser.parse_args()

    published, _ = pm.usable(pm.read_figures(pm.PUBLISHED_FILE))
    if args.refit:
        cal = pm.calibrate(published, source=f"{pm.PUBLISHED_FILE.name} "
                           f"({len(published)} figures)")
        write_calibration(cal, pm.CALIBRATION_FILE)
        print(f"refitted to {pm.PUBLISHED_FILE}; wrote {pm.CALIBRATION_FILE}")
    cal = pm.load_calibration()
    figures = pm.read_figures(args.csv)
    modelled = [f for f in figures if _modelled(f)]
    obs, skipped = pm.usable(figures)
    fit_pred = pm.predict_observations(obs, cal)
    loo_pred = fit_pred.copy()
    in_fit = [_index(o, published) for o in obs]
    for i, j in enumerate(in_fit):
        if j is not None:
            rest = [p for k, p in enumerate(published) if k != j]
            loo_cal = pm.fit(rest, pm.prior_calibration(), source="leave-one-out")
            loo_pred[i] = pm.predict_observations([obs[i]], loo_cal)[0]
    values = np.array([o.value for o in obs])
    fit_err, loo_err = fit_pred / values - 1, loo_pred / values - 1

    print(f"calibration: {cal.source}; rows of {args.csv}: {len(figures)}, "
          f"modelled {len(obs)}, skipped {len(skipped)}\n")
    header = (f"{'model':13} {'engine':6} {'gpu':9} {'par.':8} {'isl/osl':9} {'conc':>4} "
              f"{'metric':22} {'published':>9} {'predicted':>9} {'fit':>6} {'LOO':>6}  notes")
    print(header)
    print("-" * len(header))
    rows = zip(modelled, obs, fit_pred, fit_err, loo_err, in_fit, strict=True)
    for fig, o, fp, fe, le, j in rows:
        s = o.setup
        conc = "max" if o.concurrency == pm.MAX else f"{o.concurrency:.0f}"
        par = fig.parallelism
        notes = list(o.notes) + ([] if j is not None else ["not in the fit set"])
        print(f"{s.model.name:13} {s.engine.name:6} {s.gpu.name:9} {par:8} "
              f"{f'{s.isl}/{s.osl}':9} {conc:>4} {o.metric:22} {o.value:>9,.0f} {fp:>9,.0f} "
              f"{fe:>+6.0%} {le:>+6.0%}  {'; '.join(notes)}")
    for f, reason in skipped:
        print(f"{f.model:13} {f.engine:6} {f.gpu:9} {f.parallelism:8} {f.isl + '/' + f.osl:9} "
              f"{f.concurrency:>4} {f.metric:22} {f.value:>9}  skipped: {reason}")
    if not obs:
        print("\nno row could be modelled")
        return
    print(f"\nmedian absolute error: {np.median(np.abs(fit_err)):.1%} with the shipped "
          f"calibration ({sum(j is not None for j in in_fit)} of {len(obs)} rows in-sample), "
          f"{np.median(np.abs(loo_err)):.1%} leave-one-out")
    print(f"worst absolute error:  {np.max(np.abs(fit_err)):.1%} with the shipped calibration, "
          f"{np.max(np.abs(loo_err)):.1%} leave-one-out")


def _index(o: pm.Observation, published: list[pm.Observation]) -> int | None:
    for j, p in enumerate(published):
        if p == o:
            return j
    return None


def _modelled(f: pm.Figure) -> bool:
    try:
        pm.observation(f)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    main()
