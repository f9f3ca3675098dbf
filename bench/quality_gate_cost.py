"""The quality gate's cost in a study that ran it, against each trial's own time. Run by hand after
a study, e.g.

    .venv/bin/tuner run examples/tiny-moe-cpu.yaml --n-trials 2 --no-confirm   # tuner.db here
    .venv/bin/python bench/quality_gate_cost.py --study tiny-moe-cpu-demo

One row per trial that ran the gate: its time from start to finish (server start, sweep, gate,
stop), the gate's seconds on its server (asking the prompts and comparing), their ratio, and the
verdict; then the reference's answering time and the one server start it costs the study (not
per trial). Figures on a shared 2-core machine move with what else runs there.
"""

from __future__ import annotations

import argparse

from tuner.spec.space import describe
from tuner.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default="sqlite:///tuner.db")
    parser.add_argument("--study", required=True)
    args = parser.parse_args()
    with Store.open(args.storage, create=False) as store:
        trials = [t for t in store.trials(args.study) if t.quality is not None]
        reference = store.reference(args.study)
    print(f"{'trial':>5}  {'trial s':>8}  {'gate s':>7}  {'gate/trial':>10}  verdict  config")
    ratios = []
    for t in trials:
        total = (t.finished_at - t.started_at).total_seconds()
        ratio = t.quality.gate_s / total
        ratios.append(ratio)
        verdict = "passed" if t.quality.passed else "FAILED"
        print(f"{t.number:>5}  {total:>8.1f}  {t.quality.gate_s:>7.2f}  {ratio:>10.1%}  "
              f"{verdict:<7}  {describe(t.params)}")
    if ratios:
        print(f"gate / trial time: mean {sum(ratios) / len(ratios):.1%}, max {max(ratios):.1%} "
              f"over {len(ratios)} trials")
    if reference is not None and reference.answer_s is not None:
        print(f"reference (once per study): answered in {reference.answer_s:.2f} s, plus one "
              "server start")


if __name__ == "__main__":
    main()
