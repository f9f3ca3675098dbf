"""How fast the dashboard's study and Choose pages render on large studies: run by hand, prints
a table.

    .venv/bin/python -m bench.dashboard_load [--trials 5000] [--db PATH] [--rebuild]
                                             [--pages study,choose]

It builds databases of SYNTHETIC BENCHMARK DATA (made-up trials and figures, labelled so in the
studies' names and specs; never a measurement) through the product's own writers: tuner's Store
API for tuner's tables and Optuna's API for Optuna's, in the same SQLite file. The study page's
database holds one H200 study of --trials trials; the Choose page's holds an H200-like and a
B200-like study of --trials / 2 trials each (--trials across studies). Then it renders each page
with Streamlit's AppTest, cold (a fresh app: every query and computation runs) and warm (a
rerun: the page's caches hit), and prints the times. The target is a cold render under 3 s on a
2-core machine.

The databases are kept at --db (default /tmp/tuner-dashboard-bench.db) and beside it
(`-choose.db`), and reused by later runs with the same --trials; --rebuild makes them again.

`--smoke`: 40 synthetic trials in databases of a temporary folder, one cold and one warm render
of each page (seconds); far from the target's size.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.report.dashboard_data import STORAGE_ENV
from tuner.store import Store
from tuner.store.records import LevelMeasurement

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "dashboard" / "app.py"
STUDY = "synthetic-benchmark-data"
# The Choose page's studies: name, GPU type and how much faster per GPU than an H200 (made up).
CHOOSE_STUDIES = (("synthetic-benchmark-data-h200", "H200", 1.0),
                  ("synthetic-benchmark-data-b200", "B200", 1.8))
SPACE = {
    "tensor_parallel_size": [1, 2, 4, 8],
    "data_parallel_size": [1, 2, 4],
    "enable_expert_parallel": [False, True],
    "max_batch_size": [16, 64, 128, 256, 512],
    "max_num_tokens": [2048, 8192, 16384],
    "speculative_method": ["none", "ngram"],
}
LEVELS = [4, 16, 64, 256]
SLA = {"ttft_p90_ms": 2000.0, "min_tok_s_per_user_p90": 40.0}
SPEC = {
    "name": STUDY,
    "note": "SYNTHETIC BENCHMARK DATA made by bench/dashboard_load.py: not a measurement",
    "search_space": "synthetic",
    "model": {"path": "synthetic/gpt-oss-120b"},
    "engine": {"name": "vllm", "executable": "vllm", "args": {"max-model-len": 8192}, "env": {}},
    "hardware": {"gpu_type": "H200"},
    "workload": {"input_len": 1024, "output_len": 1024, "concurrency": LEVELS,
                 "requests_per_level": 256},
    "sla": SLA,
    "objective": {"metric": "output_tok_s_per_gpu"},
    "budget": {"n_trials": 5000},
}


def _levels(rng: random.Random, params: dict, speed: float = 1.0) -> list[LevelMeasurement]:
    """Made-up but plausible figures: throughput per GPU rises with concurrency and batch size,
    per-user speed falls; more parallelism trades per-GPU throughput for per-user speed."""
    tp, dp = params["tensor_parallel_size"], params["data_parallel_size"]
    gpus = tp * dp
    cap = params["max_batch_size"] * (1.25 if params["speculative_method"] == "ngram" else 1.0)
    rows = []
    for c in LEVELS:
        running = min(c, cap * dp)
        user = speed * 220 * (tp ** 0.35) / (1 + running / (60 * dp)) * rng.uniform(0.85, 1.15)
        per_gpu = running * user / gpus * (1.1 if params["enable_expert_parallel"] else 1.0)
        ttft = 40 + 4 * c / dp * rng.uniform(0.8, 1.2)
        meets = ttft <= SLA["ttft_p90_ms"] and user * 0.8 >= SLA["min_tok_s_per_user_p90"]
        rows.append(LevelMeasurement(
            concurrency=c, requests=256, errors=0, duration_s=60.0, input_tokens=256 * 1024,
            output_tokens=256 * 1024, request_throughput=per_gpu * gpus / 1024,
            output_tok_s=per_gpu * gpus, output_tok_s_per_gpu=per_gpu, ttft_p50_ms=ttft * 0.7,
            ttft_p90_ms=ttft, ttft_p99_ms=ttft * 1.3, itl_p50_ms=1000 / user,
            itl_p90_ms=1200 / user, itl_p99_ms=1500 / user, tpot_p50_ms=1000 / user,
            tpot_p90_ms=1250 / user, e2e_p50_ms=ttft + 1024 * 1000 / user,
            e2e_p90_ms=ttft + 1024 * 1250 / user, tok_s_per_user_p50=user,
            tok_s_per_user_p90=user * 0.8, goodput_rps=per_gpu * gpus / 1024 if meets else 0.0,
            meets_sla=meets))
    return rows


def build(path: Path, n_trials: int, seed: int = 0,
          studies: tuple[tuple[str, str, float], ...] = ((STUDY, "H200", 1.0),)) -> None:
    """Write `n_trials` synthetic trials, shared out over `studies` (name, GPU type, speed),
    into a new database at `path`."""
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    rng = random.Random(seed)
    store = Store.open(url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for name, gpu_type, speed in studies:
        _study(store, url, rng, name, gpu_type, speed, n_trials // len(studies))
    store.close()


def _study(store: Store, url: str, rng: random.Random, name: str, gpu_type: str, speed: float,
           n_trials: int) -> None:
    spec = {**SPEC, "name": name, "hardware": {"gpu_type": gpu_type}}
    store.ensure_study(name, engine="vllm", model="synthetic/gpt-oss-120b", gpu_type=gpu_type,
                       spec=spec, space={"name": "synthetic", "engine": "vllm", "parameters": {
                           k: {"values": v} for k, v in SPACE.items()}},
                       tuner_version="bench")
    study = optuna.create_study(study_name=name, storage=url, direction="maximize")
    dists = {k: CategoricalDistribution(v) for k, v in SPACE.items()}
    frozen = []
    hardware = {"kind": "gpu", "type": gpu_type, "description": "synthetic", "host": "bench"}
    for number in range(n_trials):
        params = {k: rng.choice(v) for k, v in SPACE.items()}
        if params["enable_expert_parallel"] and params["tensor_parallel_size"] * \
                params["data_parallel_size"] == 1:
            store.record_infeasible(name, number, params,
                                    "enable_expert_parallel needs more than one rank")
            frozen.append(create_trial(params=params, distributions=dists,
                                       state=TrialState.FAIL))
            continue
        gpus = params["tensor_parallel_size"] * params["data_parallel_size"]
        tid = store.start_trial(name, number, params, worker_host="bench", worker_pid=1,
                                gpus=gpus, hardware=hardware,
                                log_path=f"/nonexistent/trial-{number:04d}/server.log")
        roll = rng.random()
        if roll < 0.04:
            store.finish_trial(tid, state="failed", failure_kind="oom",
                               failure_reason="torch.OutOfMemoryError: CUDA out of memory",
                               log_tail="...\ntorch.OutOfMemoryError: CUDA out of memory")
            frozen.append(create_trial(params=params, distributions=dists,
                                       state=TrialState.FAIL))
            continue
        levels = _levels(rng, params, speed)
        ok = [m for m in levels if m.meets_sla]
        objective = max((m.output_tok_s_per_gpu for m in ok), default=None)
        store.finish_trial(tid, state="complete", objective=objective, meets_sla=bool(ok),
                           engine_version="synthetic", measurements=levels)
        frozen.append(create_trial(params=params, distributions=dists,
                                   value=objective if objective is not None else 0.0))
    study.add_trials(frozen)


def render(url: str, page: str, query: dict[str, str], *,
           timeout: float) -> tuple[float, float, int]:
    """Seconds for a cold render of `page` (caches cleared: every query and computation runs)
    and a warm one (a rerun, as when a user clicks), and the elements drawn."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ[STORAGE_ENV] = url
    at = AppTest.from_file(str(APP), default_timeout=timeout)
    at.query_params.update(query)
    at.run()  # the overview page, the app's default
    at.switch_page(page)
    st.cache_data.clear()
    st.cache_resource.clear()
    t0 = time.perf_counter()
    at.run()
    cold = time.perf_counter() - t0
    problems = [e.value for e in at.exception] + [e.value for e in at.error]
    if problems:
        raise SystemExit(f"{page} did not render: {problems[0]}")
    t1 = time.perf_counter()
    at.run()
    warm = time.perf_counter() - t1
    return cold, warm, sum(1 for _ in at.main)


def _database(path: Path, n_trials: int, rebuild: bool, studies) -> str:
    """The synthetic database at `path`, built unless a build of `n_trials` is there."""
    marker = path.with_name(path.name + f".{n_trials}-trials")
    if rebuild or not (path.exists() and marker.exists()):
        marker.unlink(missing_ok=True)
        t0 = time.perf_counter()
        print(f"building {n_trials:,} synthetic trials into {path} ...", flush=True)
        build(path, n_trials, studies=studies)
        marker.touch()
        print(f"built in {time.perf_counter() - t0:.1f} s")
    return f"sqlite:///{path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=5000)
    parser.add_argument("--db", type=Path, default=Path("/tmp/tuner-dashboard-bench.db"))
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--runs", type=int, default=3, help="cold renders to time, per page")
    parser.add_argument("--pages", default="study,choose", help="study, choose or both")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: 40 trials in a temporary folder, one render of each page")
    args = parser.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            args.trials, args.runs, args.rebuild = 40, 1, True
            args.db = Path(tmp) / "dashboard-bench.db"
            print(f"smoke: {args.trials} synthetic trials, far from the target's size")
            run(args)
        return
    run(args)


def run(args: argparse.Namespace) -> None:

    pages = []
    if "study" in args.pages:
        url = _database(args.db, args.trials, args.rebuild, ((STUDY, "H200", 1.0),))
        pages.append(("study", f"{STUDY} ({args.trials:,} trials)", url, "views/study.py",
                      {"study": STUDY}))
    if "choose" in args.pages:
        db = args.db.with_name(args.db.stem + "-choose.db")
        url = _database(db, args.trials, args.rebuild, CHOOSE_STUDIES)
        pages.append(("choose", f"2 studies (H200, B200), {args.trials:,} trials in all", url,
                      "views/choose.py", {}))
    print(f"\n{os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    print(f"{'page':>7}  {'run':>4}  {'cold s':>7}  {'warm s':>7}  {'elements':>8}  data")
    verdicts = []
    for name, what, url, page, query in pages:
        colds = []
        for i in range(args.runs):
            cold, warm, n = render(url, page, query, timeout=120)
            colds.append(cold)
            print(f"{name:>7}  {i + 1:>4}  {cold:>7.2f}  {warm:>7.2f}  {n:>8}  {what}")
        best, worst = min(colds), max(colds)
        verdict = "under" if worst < 3 else "OVER"
        verdicts.append(f"{name} page cold render: best {best:.2f} s, worst {worst:.2f} s "
                        f"({verdict} the 3 s target)")
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
