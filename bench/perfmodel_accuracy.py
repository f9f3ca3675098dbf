"""How far the performance model is from published figures: run by hand, prints a table.

    .venv/bin/python -m bench.perfmodel_accuracy [CSV] [--refit]

The shipped factors (tuner/data/perfmodel_calibration.json) are fitted to the figures of
tuner/data/published.csv published at 1024/1024 only (the calibration rows); every other row is
held out. Every row of CSV (default published.csv, or any file with its columns) is listed with
the model's prediction and its relative error:

- a calibration row: leave-one-out, the factors refitted to every other calibration row;
- a held-out row: the shipped calibration, which never saw it.

Rows the model cannot predict (disaggregated serving, unknown GPU, ...) are listed as skipped
with the reason. Then, per metric (tok/s per GPU, tok/s per user, TTFT), the median and worst
absolute error on calibration rows and on held-out rows separately, and the same for the
max-throughput figures. `--refit` first refits the factors to the calibration rows and rewrites
the shipped calibration file (its bands included).

`--smoke`: the default run (published.csv, the shipped calibration), which takes seconds anyway;
it never refits or writes.
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
    parser.add_argument("--smoke", action="store_true",
                        help="the default run (seconds); refuses --refit and another CSV")
    args = parser.parse_args()
    if args.smoke and (args.refit or args.csv != pm.PUBLISHED_FILE):
        sys.exit("--smoke: the default run only, with neither --refit nor a CSV")

    fit_set = calibration_rows()
    if args.refit:
        cal = pm.calibrate(fit_set, source=f"{pm.PUBLISHED_FILE.name} "
                           f"({len(fit_set)} figures at 1024/1024)")
        write_calibration(cal, pm.CALIBRATION_FILE)
        print(f"refitted to {len(fit_set)} calibration rows of {pm.PUBLISHED_FILE}; wrote "
              f"{pm.CALIBRATION_FILE}")
    cal = pm.load_calibration()
    figures = pm.read_figures(args.csv)
    rows: list[tuple[pm.Figure, pm.Observation, bool]] = []
    skipped = []
    for fig in figures:
        try:
            o = pm.observation(fig)
        except ValueError as e:
            skipped.append((fig, str(e)))
            continue
        rows.append((fig, o, o in fit_set))
    pred = pm.predict_observations([o for _, o, _ in rows], cal)
    for i, (_, o, calibrating) in enumerate(rows):
        if calibrating:
            rest = [p for p in fit_set if p != o]
            pred[i] = pm.predict_observations([o], pm.fit(rest, pm.prior_calibration(),
                                                          source="leave-one-out"))[0]
    err = pred / np.array([o.value for _, o, _ in rows]) - 1 if rows else np.zeros(0)

    print(f"calibration: {cal.source}; rows of {args.csv}: {len(figures)}, modelled "
          f"{len(rows)} ({sum(c for _, _, c in rows)} calibration, "
          f"{sum(not c for _, _, c in rows)} held out), skipped {len(skipped)}\n")
    header = (f"{'model':13} {'engine':6} {'gpu':9} {'par.':8} {'isl/osl':11} {'conc':>4} "
              f"{'metric':22} {'published':>9} {'predicted':>9} {'error':>6}  set")
    print(header)
    print("-" * len(header))
    for (fig, o, calibrating), p, e in zip(rows, pred, err, strict=True):
        conc = "max" if o.concurrency == pm.MAX else f"{o.concurrency:.0f}"
        lengths = f"{fig.isl}/{fig.osl}" + ("~" if fig.length_range else "")
        notes = "calibration (LOO)" if calibrating else "held out"
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
    print(f"\n{'metric':16} {'set':12} {'rows':>4} {'median |err|':>13} {'worst |err|':>12}")
    sets = (("calibration", True), ("held out", False))
    kinds = [(g, lambda o, g=g: pm.GROUP_OF[o.metric] == g) for g in pm.GROUPS]
    kinds.append(("max throughput", lambda o: o.concurrency == pm.MAX))
    for kind, chosen in kinds:
        for label, calibrating in sets:
            e = np.array([abs(x) for (_, o, c), x in zip(rows, err, strict=True)
                          if c == calibrating and chosen(o)])
            figures_ = (f"{np.median(e):>13.1%} {np.max(e):>12.1%}" if len(e)
                        else f"{'no rows':>13} {'-':>12}")
            print(f"{kind:16} {label:12} {len(e):>4} {figures_}")


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


if __name__ == "__main__":
    main()
