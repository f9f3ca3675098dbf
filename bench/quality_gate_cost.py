"""The quality gate's cost in a study that ran it, against each trial's own time. Run by hand after
a study, e.g.

    .venv/bin/tuner run examples/tiny-moe-cpu.yaml --n-trials 2 --no-confirm   # tuner.db here
    .venv/bin/python -m bench.quality_gate_cost --study tiny-moe-cpu-demo

One row per trial that ran the gate: its time from start to finish (server start, sweep, gate,
stop), the gate's seconds on its server (asking the prompts and comparing), their ratio, and the
verdict; then the reference's answering time and the one server start it costs the study (not
per trial). Figures on a shared 2-core machine move with what else runs there.

`--smoke`: first runs a 2-trial study with the gate on (`tuner run`, a grid of two batch sizes,
8 gate prompts) in a temporary folder, served by the repository's fake engine
(tuner.testing.fake_engine), then reports that study (seconds). The gate's time is real, on the
fake's answers: it says nothing of a real model's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from tuner.spec.space import describe
from tuner.store import Store
from tuner.testing.fake_engine import LANDSCAPE_ENV, fake_model, fake_vllm

SMOKE_STUDY = "quality-gate-cost-smoke"


def smoke_study(folder: Path) -> str:
    """Run a 2-trial study with the quality gate on, served by the fake engine, as a user runs
    one (`tuner run`); its database's URL."""
    (folder / "landscape.json").write_text(json.dumps({"default": {"ttft_s": 0.005,
                                                                   "itl_s": 0.002}}))
    (folder / "space.yaml").write_text(yaml.safe_dump({
        "name": "batch", "engine": "vllm",
        "parameters": {"max_batch_size": {"values": [4, 16]}}}))
    storage = f"sqlite:///{folder / 'tuner.db'}"
    spec = {
        "name": SMOKE_STUDY, "search_space": "space.yaml", "storage": storage,
        "model": {"path": str(fake_model(folder / "model"))},
        "engine": {"name": "vllm", "executable": str(fake_vllm(folder / "bin")),
                   "ready_timeout_s": 30, "env": {LANDSCAPE_ENV: str(folder / "landscape.json")}},
        "hardware": {"gpu_type": "cpu", "devices": 1},
        "workload": {"input_len": 8, "output_len": 8, "concurrency": [2],
                     "requests_per_level": 8, "warmup_requests": 1},
        "sla": {"ttft_p90_ms": 1000},
        "sampler": {"name": "grid"},
        "budget": {"n_trials": 2, "trial_timeout_s": 60, "confirm_top_k": 0},
        "quality": {"prompts": 8, "max_tokens": 4, "concurrency": 4, "input_len": 8},
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    run = subprocess.run([sys.executable, "-m", "tuner.cli", "run", "study.yaml"], cwd=folder,
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        sys.exit(f"tuner run exited {run.returncode}:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    return storage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default="sqlite:///tuner.db")
    parser.add_argument("--study")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: run a 2-trial study on the fake engine, then report it")
    args = parser.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            args.storage, args.study = smoke_study(Path(tmp)), SMOKE_STUDY
            print(f"smoke: study {SMOKE_STUDY}, 2 trials served by the fake engine "
                  "(tuner.testing.fake_engine)")
            if not report(args):
                sys.exit("smoke: no trial of the study ran the quality gate")
        return
    if not args.study:
        parser.error("the following arguments are required: --study")
    report(args)


def report(args: argparse.Namespace) -> int:
    """Print the table; the number of trials that ran the gate."""
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
    return len(trials)


if __name__ == "__main__":
    main()
