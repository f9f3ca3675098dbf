"""The dashboard's data: pure functions over the store's records, tested without Streamlit.

Small databases are built here with the Store API (tuner's tables) and Optuna's API (Optuna's
tables) in the same SQLite file, as a study would write them.
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import optuna
import pandas as pd
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial
from sqlalchemy.exc import OperationalError

from tuner.report import dashboard_data as dd
from tuner.report.export import write_export
from tuner.store import QualityCheck, Store, StoreError
from tuner.store.records import LevelMeasurement

SPEC = {
    "name": "s",
    "model": {"path": "/models/tiny-gpt-oss"},
    "engine": {"name": "vllm", "executable": "vllm", "args": {"max-model-len": 512},
               "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}},
    "hardware": {"gpu_type": "cpu"},
    "workload": {"input_len": 32, "output_len": 64, "concurrency": [2, 8]},
    "sla": {"ttft_p90_ms": 500.0, "min_tok_s_per_user_p90": 50.0},
    "objective": {"metric": "output_tok_s_per_gpu"},
    "budget": {"n_trials": 4},
}
SPACE = {"name": "t", "engine": "vllm", "parameters": {
    "tensor_parallel_size": {"values": [1, 2]}, "enable_expert_parallel": {"values": [False, True]},
    "max_batch_size": {"values": [4, 16]}}}
# The serving path: the dashboard and its data never import these (it reads the store only).
SERVING_PATH = ("tuner.serve.launcher", "tuner.search.loop", "tuner.search.trial",
                "tuner.measure.loadgen")
HW = {"kind": "cpu", "type": "cpu", "description": "2 CPU cores", "host": "h"}
BASE = LevelMeasurement(
    concurrency=2, requests=16, errors=0, duration_s=2.0, input_tokens=512, output_tokens=1024,
    request_throughput=8.0, output_tok_s=400.0, output_tok_s_per_gpu=400.0, ttft_p50_ms=20.0,
    ttft_p90_ms=30.0, ttft_p99_ms=35.0, itl_p50_ms=5.0, itl_p90_ms=8.0, itl_p99_ms=9.0,
    tpot_p50_ms=6.0, tpot_p90_ms=7.0, e2e_p50_ms=400.0, e2e_p90_ms=450.0,
    tok_s_per_user_p50=160.0, tok_s_per_user_p90=140.0, goodput_rps=8.0, meets_sla=True)


def level(c: int, per_gpu: float, user_p90: float | None, meets: bool = True,
          **changes) -> LevelMeasurement:
    return replace(BASE, concurrency=c, output_tok_s_per_gpu=per_gpu, output_tok_s=per_gpu,
                   tok_s_per_user_p90=user_p90, meets_sla=meets, **changes)


class StudyWriter:
    """Writes a study as `tuner run` would: tuner's records and Optuna's trials, same DB."""

    def __init__(self, url: str, name: str = "s", *, gpu_type: str = "cpu",
                 spec: dict | None = None, optuna_study: bool = True) -> None:
        self.url, self.name = url, name
        self.store = Store.open(url)
        spec = {**SPEC, "name": name, "hardware": {"gpu_type": gpu_type}, **(spec or {})}
        self.store.ensure_study(name, engine="vllm", model="/models/tiny-gpt-oss",
                                gpu_type=gpu_type, spec=spec, space=SPACE, tuner_version="test")
        self.optuna = None
        if optuna_study:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            self.optuna = optuna.create_study(study_name=name, storage=url, direction="maximize")
        self.dists = {k: CategoricalDistribution(v["values"])
                      for k, v in SPACE["parameters"].items()}

    def complete(self, number: int, params: dict, levels: list[LevelMeasurement],
                 log_path: str | None = None, **finish) -> None:
        tid = self.store.start_trial(self.name, number, params, worker_host="h", worker_pid=1,
                                     gpus=params.get("tensor_parallel_size", 1), hardware=HW,
                                     launch_plan=_plan(params), log_path=log_path)
        ok = [m.output_tok_s_per_gpu for m in levels if m.meets_sla]
        objective = max(ok) if ok else None
        self.store.finish_trial(tid, state="complete", objective=objective, meets_sla=bool(ok),
                                engine_version="0.32.0", measurements=levels, **finish)
        self._tell(params, objective if objective is not None else 0.0)

    def fail(self, number: int, params: dict, kind: str, reason: str, *,
             log_tail: str | None = None, log_path: str | None = None,
             levels: list[LevelMeasurement] = ()) -> None:
        tid = self.store.start_trial(self.name, number, params, worker_host="h", worker_pid=1,
                                     gpus=params.get("tensor_parallel_size", 1), hardware=HW,
                                     launch_plan=_plan(params), log_path=log_path)
        self.store.finish_trial(tid, state="failed", failure_kind=kind, failure_reason=reason,
                                log_tail=log_tail, measurements=levels)
        self._tell(params, None)

    def infeasible(self, number: int, params: dict, reason: str) -> None:
        self.store.record_infeasible(self.name, number, params, reason)
        self._tell(params, None)

    def running(self, number: int, params: dict) -> None:
        self.store.start_trial(self.name, number, params, worker_host="h", worker_pid=1,
                               gpus=1, hardware=HW, launch_plan=_plan(params))

    def _tell(self, params: dict, value: float | None) -> None:
        if self.optuna is None:
            return
        state = TrialState.COMPLETE if value is not None else TrialState.FAIL
        self.optuna.add_trial(create_trial(params=params, distributions=self.dists,
                                           value=value, state=state))

    def data(self) -> dd.StudyData:
        return dd.read_study(self.store, self.name)


def _plan(params: dict) -> dict:
    tp = params.get("tensor_parallel_size", 1)
    return {"engine": "vllm", "argv": ["vllm", "serve", "/models/tiny-gpt-oss", "--config",
                                       "config.yaml", "--port", "41000"],
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "files": {"config.yaml": f"tensor-parallel-size: {tp}\n"},
            "host": "127.0.0.1", "port": 41000, "model": "/models/tiny-gpt-oss", "gpus": tp}


def P(tp: int = 1, ep: bool = False, batch: int = 16) -> dict:  # noqa: N802 (a short builder)
    return {"tensor_parallel_size": tp, "enable_expert_parallel": ep, "max_batch_size": batch}


def mixed_study(url: str, name: str = "s", gpu_type: str = "cpu") -> StudyWriter:
    """Two complete trials (trial 2 the best), a crash with a log tail, an infeasible one."""
    w = StudyWriter(url, name, gpu_type=gpu_type)
    w.complete(0, P(2), [level(2, 300.0, 200.0), level(8, 900.0, 120.0)])
    w.fail(1, P(2, True), "crash", "Segfault encountered in fused_moe_impl",
           log_tail="loading...\nSegfault encountered in fused_moe_impl\n")
    w.complete(2, P(1, batch=4), [level(2, 500.0, 230.0), level(8, 1500.0, 150.0)])
    w.infeasible(3, P(1, True), "expert parallel over a single rank")
    return w


# Reasons as the search words them: per GPU, whatever the study's hardware (the pages say them
# in the study's unit).
PRUNED = ("clearly below the incumbent: its best level (c=8) reached at most 760 tok/s/GPU "
          "(95% interval) in 3 rounds, under the incumbent's 1,400")
DIFFERS = ("-200 tok/s/GPU (-13%) from the first run (1,500), beyond ±90 tok/s/GPU (95% "
           "intervals of both runs)")
GATE_FAILED = QualityCheck(
    passed=False, prompts=8, exact_match_rate=0.75, mean_common_prefix=20.0,
    common_prefix_share=0.8, mean_logprob_divergence=0.02, gate_s=1.5, answers=[],
    reason="2 of 8 answers diverge", identical=6, near_ties=0, diverging=2, failed=0)
# A level where every request failed: no figure to draw.
DEAD = dict(errors=16, ttft_p50_ms=None, ttft_p90_ms=None, ttft_p99_ms=None, itl_p50_ms=None,
            itl_p90_ms=None, itl_p99_ms=None, tpot_p50_ms=None, tpot_p90_ms=None,
            e2e_p50_ms=None, e2e_p90_ms=None, tok_s_per_user_p50=None, goodput_rps=0.0,
            error_sample="connection reset")


def troubled_study(url: str, name: str = "s", gpu_type: str = "cpu") -> StudyWriter:
    """mixed_study and everything else that goes wrong: a pruned trial, one that failed the
    quality gate with its figures, a level where every request failed, a confirmation that
    differs, and a trial still running."""
    w = mixed_study(url, name, gpu_type)
    store = w.store
    for number, params, state, objective, levels, extra in (
            (4, P(2, batch=4), "pruned", 700.0,
             [level(2, 300.0, 240.0), level(8, 700.0, 160.0)], {"failure_reason": PRUNED}),
            (5, P(1), "failed", 1050.0, [level(2, 400.0, 220.0), level(8, 1050.0, 140.0)],
             {"failure_kind": "quality", "failure_reason": "2 of 8 answers diverge",
              "quality": GATE_FAILED}),
            (6, P(2, True, 4), "complete", 450.0,
             [level(2, 450.0, 210.0), level(8, 0.0, None, meets=False, **DEAD)], {})):
        tid = store.start_trial(name, number, params, worker_host="h", worker_pid=1,
                                gpus=params["tensor_parallel_size"], hardware=HW,
                                launch_plan=_plan(params))
        store.finish_trial(tid, state=state, objective=objective, meets_sla=True,
                           engine_version="0.32.0", measurements=levels, **extra)
        w._tell(params, objective if state == "complete" else None)
    store.record_confirmation(name, 2, state="differs", objective=1300.0, meets_sla=True,
                              reason=DIFFERS, measurements=[level(2, 450.0, 220.0),
                                                            level(8, 1300.0, 140.0)])
    w.running(7, P(1, True, 4))
    return w


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'tuner.db'}"


# ---------------------------------------------------------------- Pareto front


def _points(xy: list[tuple[float | None, float | None]]) -> pd.DataFrame:
    return pd.DataFrame({dd.USER_P90: [p[0] for p in xy], dd.TOK_GPU: [p[1] for p in xy],
                         "trial": range(len(xy)), "state": "complete", "meets SLA": True}
                        ).astype({dd.USER_P90: float, dd.TOK_GPU: float})


def test_the_pareto_front_keeps_exactly_the_points_nothing_beats_on_both_axes():
    pts = _points([(10, 100), (20, 90), (15, 80), (30, 50), (5, 100), (30, 40), (1, 120)])
    front = dd.pareto_front(pts)
    # (15, 80) is beaten by (20, 90); (5, 100) by (10, 100); (30, 40) by (30, 50).
    assert front.front["trial"].tolist() == [6, 0, 1, 3]
    assert front.points["on front"].tolist() == [True, True, False, True, False, False, True]


def test_the_front_is_sorted_along_x_and_ignores_unmeasured_and_dead_points():
    pts = _points([(None, 500), (50, None), (80, 0.0), (40, 10), (40, 10)])
    front = dd.pareto_front(pts)
    assert front.front["trial"].tolist() == [3]  # one of two identical points; none of the rest
    assert dd.pareto_front(_points([])).front.empty


def test_the_front_brute_force_agrees_on_random_points():
    import random

    rng = random.Random(7)
    xy = [(rng.randint(1, 30), rng.randint(1, 30)) for _ in range(200)]
    front = set(dd.pareto_front(_points(xy)).front["trial"])
    expected = {i for i, (x, y) in enumerate(xy)
                if not any((a >= x and b >= y) and (a > x or b > y) for a, b in xy)}
    # Of duplicates on the front only the first is kept.
    firsts = {i for i in expected if xy.index(xy[i]) == i}
    assert front == firsts


# ---------------------------------------------------------------- studies and trials


def test_a_study_summary_counts_states_and_names_the_best_trial(url):
    w = mixed_study(url)
    s = dd.summarize(w.data())
    assert s.counts == {"complete": 2, "pruned": 0, "failed": 1, "infeasible": 1, "running": 0}
    assert s.best.number == 2 and s.best_value == 1500.0
    assert s.state == "stopped"  # 3 launched of a budget of 4
    assert s.started is not None and s.finished is not None and s.finished >= s.started
    assert s.model == "tiny-gpt-oss"

    w.complete(4, P(2, batch=4), [level(2, 100.0, 300.0)])
    assert dd.summarize(w.data()).state == "finished"
    w.running(5, P(1))
    running = dd.summarize(w.data())
    assert running.state == "running" and running.finished is None
    assert running.counts["running"] == 1


def test_the_overview_has_one_row_per_study_with_its_figures(url):
    mixed_study(url, "a")
    StudyWriter(url, "b", gpu_type="H200")
    store = dd.open_store(url)
    frame = dd.overview_frame([dd.summarize(d) for d in dd.read_studies(store)])
    assert frame["study"].tolist() == ["a", "b"]
    a, b = frame.iloc[0], frame.iloc[1]
    assert (a["complete"], a["failed"], a["infeasible"], a["running"]) == (2, 1, 1, 0)
    assert a[f"best {dd.TOK_GPU}"] == 1500.0 and a["best trial"] == 2
    assert b["state"] == "empty" and b["GPU type"] == "H200"
    assert pd.isna(b[f"best {dd.TOK_GPU}"])


def test_the_trials_frame_has_a_column_per_parameter_and_the_objective_level(url):
    frame = dd.trials_frame(mixed_study(url).data())
    assert frame["trial"].tolist() == [0, 1, 2, 3]
    assert {"tp", "ep", "batch"} <= set(frame.columns)
    best = frame.set_index("trial").loc[2]
    assert best[dd.TOK_GPU] == 1500.0 and best["at c"] == 8 and best[dd.USER_P90] == 150.0
    assert best["ep"] == "off" and best["tp"] == 1
    crashed = frame.set_index("trial").loc[1]
    assert crashed["failure"] == "crash" and "Segfault" in crashed["reason"]
    assert pd.isna(crashed[dd.TOK_GPU])


def test_trials_filter_by_state_and_any_parameter_and_sort_with_gaps_last(url):
    frame = dd.trials_frame(mixed_study(url).data())
    assert dd.filter_trials(frame, states=["failed", "infeasible"])["trial"].tolist() == [1, 3]
    assert dd.filter_trials(frame, params={"tp": [2]})["trial"].tolist() == [0, 1]
    assert dd.filter_trials(frame, states=["complete"], params={"tp": [2], "ep": ["off"]})[
        "trial"].tolist() == [0]
    assert len(dd.filter_trials(frame, states=[], params={"tp": []})) == 4
    assert dd.sort_trials(frame, dd.TOK_GPU)["trial"].tolist() == [2, 0, 1, 3]
    assert dd.sort_trials(frame, dd.TOK_GPU, descending=False)["trial"].tolist() == [0, 2, 1, 3]
    assert sorted([16, 4, "on", 64], key=dd.option_order) == [4, 16, 64, "on"]


def test_progress_is_the_best_figure_so_far_among_trials_that_met_the_sla(url):
    w = mixed_study(url)
    w.complete(4, P(2, batch=4), [level(2, 5000.0, 10.0, meets=False)])  # fast but missed
    frame = dd.progress_frame(w.data())
    assert frame["trial"].tolist() == [0, 1, 2, 3, 4]
    assert frame["best so far"].tolist() == [900.0, 900.0, 1500.0, 1500.0, 1500.0]
    assert frame["outcome"].tolist() == ["met SLA", "failed", "met SLA", "infeasible",
                                         "missed SLA"]
    by_time = dd.progress_frame(w.data(), by="time")
    assert by_time["finished"].is_monotonic_increasing
    with pytest.raises(ValueError):
        dd.progress_frame(w.data(), by="nothing")


def test_measured_points_are_one_per_trial_and_level_with_their_parallelism(url):
    w = mixed_study(url)
    w.fail(4, P(2), "request_errors", "3 of 16 requests failed",
           levels=[level(2, 0.0, None, meets=False, errors=16)])
    pts = dd.measured_points(w.data())
    assert sorted(zip(pts["trial"], pts["concurrency"], strict=True)) == [
        (0, 2), (0, 8), (2, 2), (2, 8), (4, 2)]
    assert set(pts["series"]) == {"vllm TP2", "vllm TP1"}
    front = dd.pareto_front(pts)
    assert set(zip(front.front["trial"], front.front["concurrency"], strict=True)) == {
        (2, 8), (2, 2)}


def test_parallelism_labels():
    assert dd.parallelism({"tensor_parallel_size": 2}) == "TP2"
    assert dd.parallelism({"tensor_parallel_size": 1, "data_parallel_size": 2,
                           "enable_expert_parallel": True}) == "TP1×DP2 EP"
    assert dd.parallelism({"tensor_parallel_size": 8, "enable_attention_dp": True,
                           "expert_parallel_size": 8}) == "TP8 ADP EP8"
    assert dd.parallelism({}) == "TP1"


def test_failures_are_grouped_by_kind_and_reason_largest_first(url):
    w = mixed_study(url)
    w.fail(4, P(2, True, 4), "crash", "Segfault encountered in fused_moe_impl",
           log_tail="second tail\nSegfault encountered in fused_moe_impl")
    groups = dd.failure_groups(w.data())
    assert [(g.kind, g.trials) for g in groups] == [("crash", [1, 4]), ("infeasible", [3])]
    assert groups[0].log_tail.startswith("second tail")
    assert groups[1].log_tail is None and "single rank" in groups[1].reason


def test_no_failures_no_groups(url):
    w = StudyWriter(url)
    w.complete(0, P(), [level(2, 100.0, 100.0)])
    assert dd.failure_groups(w.data()) == []


# ---------------------------------------------------------------- the best configuration card


def test_the_best_card_offers_exactly_what_tuner_export_writes(url, tmp_path):
    w = mixed_study(url)
    data = w.data()
    card = dd.best_card(data)
    assert card.trial.number == 2 and card.figures[dd.TOK_GPU] == 1500.0
    assert card.figures["at concurrency"] == 8 and card.figures["TTFT p90 ms"] == 30.0
    assert {"config.yaml", "launch.sh", "best.json"} <= set(card.files)
    exported = {p.name: p.read_bytes()
                for p in write_export(data.study, card.trial, tmp_path / "export")}
    for name in ("config.yaml", "launch.sh"):
        assert card.files[name] == exported[name]
    ours, theirs = json.loads(card.files["best.json"]), json.loads(exported["best.json"])
    for record in (ours, theirs):
        record["provenance"].pop("exported_at")
    assert ours == theirs
    assert card.command == theirs["launch"]["shell"] and "vllm serve" in card.command


def test_no_best_card_when_no_trial_met_the_sla(url):
    w = StudyWriter(url)
    w.fail(0, P(2, True), "crash", "Segfault")
    w.complete(1, P(), [level(2, 100.0, 10.0, meets=False)])
    data = w.data()
    assert dd.best_of(data) is None and dd.best_card(data) is None
    assert dd.summarize(data).best_value is None


# ---------------------------------------------------------------- one trial


def test_the_level_table_shows_rates_intervals_convergence_and_engine_gauges(url):
    w = StudyWriter(url)
    repeated = dict(request_rate=4.0, rounds=5, output_tok_s_ci95=40.0, ttft_mean_ms=21.0,
                    ttft_mean_ci95_ms=1.5, itl_mean_ms=5.5, itl_mean_ci95_ms=0.2,
                    kv_cache_usage_max=0.31, requests_running_max=6.0,
                    requests_waiting_max=2.0, preemptions=0)
    w.complete(0, P(), [level(64, 400.0, 140.0, converged=False, **repeated),
                        level(64, 800.0, 120.0, converged=True,
                              **{**repeated, "request_rate": 8.0, "rounds": 2,
                                 "output_tok_s_ci95": 8.0}),
                        level(4, 900.0, 100.0)])
    levels = dd.levels_frame(w.data().trials[0])
    assert levels["rate req/s"].tolist()[:2] == [4.0, 8.0]
    ci = levels["tok/s 95% CI"].tolist()
    assert ci[:2] == ["±10.0% NOT CONVERGED", "±1.0%"] and pd.isna(ci[2])  # one round: none
    assert levels["rounds"].tolist()[:2] == [5, 2]
    assert levels["converged"].tolist()[:2] == [False, True]
    card = dd.best_card(w.data())
    assert (card.figures["at rate req/s"], card.figures["tok/s 95% CI"]) == (None, None)
    w.complete(1, P(2), [level(64, 2000.0, 150.0, converged=False, **repeated)])
    card = dd.best_card(w.data())
    assert card.figures["at rate req/s"] == 4.0
    assert card.figures["tok/s 95% CI"] == "±2.0% NOT CONVERGED"
    first = levels.iloc[0]
    assert (first["TTFT mean ms"], first["TTFT mean ± ms"], first["ITL mean ± ms"]) == (
        21.0, 1.5, 0.2)
    assert (first["KV cache max"], first["running max"], first["waiting max"],
            first["preemptions"]) == (0.31, 6.0, 2.0, 0)


def test_levels_and_launch_plan_of_a_trial(url):
    trial = mixed_study(url).data().trials[2]
    levels = dd.levels_frame(trial)
    assert levels["concurrency"].tolist() == [2, 8]
    assert {"TTFT p99 ms", "e2e p90 ms", dd.TOK_GPU, "meets SLA"} <= set(levels.columns)
    assert levels[dd.TOK_GPU].tolist() == [500.0, 1500.0]
    plan = dd.launch_view(trial)
    assert plan.command.startswith("vllm serve /models/tiny-gpt-oss --config config.yaml")
    assert plan.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert plan.files == {"config.yaml": "tensor-parallel-size: 1\n"}
    infeasible = mixed_study(f"sqlite:///{Path(url[10:]).parent / 'other.db'}").data().trials[3]
    assert dd.launch_view(infeasible) is None


# ---------------------------------------------------------------- importance


def test_importance_needs_two_complete_configurations_and_says_so(url):
    w = StudyWriter(url)
    w.complete(0, P(), [level(2, 100.0, 100.0)])
    imp = dd.param_importances(w.data())
    assert imp.values == {} and imp.complete == 1 and "at least 2 complete" in imp.note


def test_importance_rates_the_parameters_that_varied_over_distinct_configurations(url):
    w = StudyWriter(url, optuna_study=False)
    configs = [(tp, batch) for tp in (1, 2) for batch in (4, 8, 16, 32, 64)]
    for i, (tp, batch) in enumerate(configs * 2):
        w.complete(i, P(tp, batch=batch), [level(2, 100.0 * tp + i % 3, 100.0)])
    imp = dd.param_importances(w.data())
    # Ten configurations, each rated once (a repeat is not more evidence).
    assert imp.complete == 10 and imp.note is None
    assert set(imp.values) == {"tensor_parallel_size", "enable_expert_parallel",
                               "max_batch_size"}
    assert max(imp.values, key=imp.values.get) == "tensor_parallel_size"
    assert math.isclose(sum(imp.values.values()), 1.0)


def test_importance_never_counts_a_crash_as_a_figure_and_names_what_it_leaves_out(url):
    w = StudyWriter(url, optuna_study=False)
    # The batch decides the figure; TP hardly; one configuration also has a draft length.
    for i, (tp, batch) in enumerate([(tp, b) for tp in (1, 2) for b in (4, 16, 64)]):
        extra = {"num_speculative_tokens": 2} if i == 0 else {}
        w.complete(i, {**P(tp, batch=batch), **extra}, [level(2, 10.0 * batch + tp, 100.0)])
    w.fail(6, P(2, batch=8), "crash", "Segfault")
    imp = dd.param_importances(w.data())
    assert imp.complete == 6  # the crash is no figure of 0
    assert imp.left_out == ["num_speculative_tokens"]
    assert "Left out: num_speculative_tokens, which some of them do not have." in imp.note
    assert max(imp.values, key=imp.values.get) == "max_batch_size"


def test_importance_explains_a_study_where_nothing_varied(url):
    # Two configurations that differ only in a parameter one of them lacks.
    same = StudyWriter(url, "flat", optuna_study=False)
    same.complete(0, P(), [level(2, 100.0, 100.0)])
    same.complete(1, {**P(), "num_speculative_tokens": 2}, [level(2, 120.0, 100.0)])
    imp = dd.param_importances(same.data())
    assert imp.values == {} and "nothing varied" in imp.note


# ---------------------------------------------------------------- reading safely


def test_a_missing_or_foreign_database_is_the_stores_one_line_error(tmp_path):
    with pytest.raises(StoreError, match="no study database at"):
        dd.open_store(f"sqlite:///{tmp_path / 'missing.db'}")
    assert not (tmp_path / "missing.db").exists()
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE x (a)").connection.close()
    with pytest.raises(StoreError, match="not a tuner database"):
        dd.open_store(f"sqlite:///{foreign}")


def test_a_locked_database_is_retried_briefly_and_other_errors_are_not():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("SELECT", {}, Exception("database is locked"))
        return "read"

    assert dd.with_retry(flaky, first_delay_s=0.001) == "read" and len(calls) == 3

    def broken():
        calls.append(1)
        raise StoreError("cannot read trials: no such table")

    calls.clear()
    with pytest.raises(StoreError):
        dd.with_retry(broken, first_delay_s=0.001)
    assert len(calls) == 1

    def always_locked():
        raise StoreError("cannot read: database is locked")

    with pytest.raises(StoreError, match="locked"):
        dd.with_retry(always_locked, attempts=3, first_delay_s=0.001)


def test_the_data_version_changes_when_a_study_writes(url):
    w = StudyWriter(url)
    before = dd.data_version(url)
    assert dd.data_version(url) == before
    w.complete(0, P(), [level(2, 100.0, 100.0)])
    assert dd.data_version(url) != before
    pg = "postgresql://u@db/tuner"
    assert dd.data_version(pg, now=100.0) == dd.data_version(pg, now=104.0)
    assert dd.data_version(pg, now=100.0) != dd.data_version(pg, now=105.0)


def test_the_data_version_ignores_the_empty_log_a_reader_makes_and_removes(tmp_path):
    db = tmp_path / "tuner.db"
    url = f"sqlite:///{db}"
    Store.open(url).close()
    before = dd.data_version(url)
    wal = tmp_path / "tuner.db-wal"
    wal.touch()  # as each read of a WAL database makes it, until the last reader closes
    assert dd.data_version(url) == before
    wal.write_bytes(b"a commit")
    assert dd.data_version(url) != before


def test_compare_puts_each_study_best_in_one_row_and_each_front_on_one_chart(url):
    mixed_study(url, "cpu-a")
    mixed_study(url, "h200-b", gpu_type="H200")
    store = dd.open_store(url)
    datas = dd.read_studies(store)
    table = dd.compare_frame(datas)
    assert table["study"].tolist() == ["cpu-a", "h200-b"]
    assert table["GPU type"].tolist() == ["cpu", "H200"]
    assert table[f"best {dd.TOK_GPU}"].tolist() == [1500.0, 1500.0]
    front = dd.compare_points(datas)
    assert set(front.points["study"]) == {"cpu-a", "h200-b"}
    assert front.front.groupby("study").size().to_dict() == {"cpu-a": 2, "h200-b": 2}
    assert dd.compare_points([]).points.empty


def test_the_dashboards_data_never_imports_the_launcher_or_the_study_loop():
    code = ("import sys, tuner.report.dashboard_data; "
            f"bad = [m for m in {SERVING_PATH!r} "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_page_urls_quote_their_parameters():
    assert dd.page_url("trial", study="a b&c", trial=3) == "trial?study=a+b%26c&trial=3"
    assert dd.page_url("study") == "study"


def _prediction(params: dict, concurrency: int, tok_s: float) -> dict:
    from tuner.plan.planner import key_digest

    return {"config_key": key_digest(params), "params": params, "concurrency": concurrency,
            "fits": True, "output_tok_s_per_gpu": tok_s, "tok_s_per_user": 100.0,
            "ttft_ms": 50.0, "meets_sla": True, "reason": None}


def test_predictions_are_joined_to_the_measured_levels_of_the_same_configuration(url):
    w = mixed_study(url)
    w.store.save_predictions("s", [_prediction(P(1, batch=4), 2, 600.0),
                                   _prediction(P(1, batch=4), 8, 1200.0),
                                   _prediction(P(8), 8, 9999.0)],  # never measured: not joined
                             source="perfmodel", engine="vllm", gpu_type="cpu",
                             calibration="published.csv")
    pvm = dd.load_predicted_vs_measured(url, "s")
    assert pvm.predicted == 3
    rows = pvm.rows.sort_values("concurrency")
    assert rows["trial"].tolist() == [2, 2]
    assert rows["measured tok/s/GPU"].tolist() == [500.0, 1500.0]
    assert rows["error %"].round(1).tolist() == [20.0, -20.0]  # 600/500 - 1, 1200/1500 - 1
    assert pvm.median_abs_error == pytest.approx(0.20)
    # The study's own figures are untouched: predictions never become measurements.
    assert [m.output_tok_s_per_gpu for m in w.data().trials[2].measurements] == [500.0, 1500.0]


def test_without_predictions_there_is_nothing_to_join(url):
    mixed_study(url)
    pvm = dd.load_predicted_vs_measured(url, "s")
    assert (pvm.predicted, pvm.rows.empty, pvm.median_abs_error) == (0, True, None)
