"""`tuner plan`, warm start and calibration to a study: the performance model put to work.
No server is started; stores are SQLite files in a temporary directory."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import optuna
import pytest
import yaml

from tests.conftest import REPO, call_tuner, write_yaml
from tuner.plan import perfmodel as pm
from tuner.plan import planner, study_fit
from tuner.plan.dry_run import offline_study
from tuner.search import loop
from tuner.search.bridge import load_or_create_study
from tuner.search.context import StudyContext, engine_settings
from tuner.search.trial import TrialResult
from tuner.serve.engines import get_adapter
from tuner.serve.hardware import planned_inventory
from tuner.spec.feasibility import infeasibility
from tuner.spec.gpu_types import gpu_type
from tuner.spec.model_shape import shape_by_name
from tuner.spec.sla import SLA
from tuner.spec.space import load_space
from tuner.spec.study_spec import load_spec
from tuner.store import Store
from tuner.store.records import LevelMeasurement
from tuner.verdict.rules import config_key

EXAMPLE = REPO / "examples" / "gpt-oss-120b.yaml"
# A small gpt-oss-120b space: TP1 at memory fraction 0.4 cannot hold its 65 GB of weights on a
# 141 GB H200; the rest fits. (On an H100 vLLM's recipe rules TP1 below 0.95 out first.)
SMALL_SPACE = {
    "name": "small",
    "model": "gpt-oss-120b",
    "engine": "vllm",
    "parameters": {
        "tensor_parallel_size": {"values": [1, 2, 4]},
        "moe_backend": {"values": ["triton", "flashinfer_trtllm"]},
        "max_batch_size": {"values": [16, 256]},
        "kv_cache_dtype": {"values": ["auto", "fp8"]},
        "gpu_memory_fraction": {"values": [0.4, 0.9]},
    },
}


def small_spec(tmp_path: Path, gpu: str = "H200") -> Path:
    write_yaml(tmp_path / "space.yaml", SMALL_SPACE)
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec.update(search_space="space.yaml", hardware={"gpu_type": gpu, "devices": 8},
                storage=f"sqlite:///{tmp_path / 'tuner.db'}", runs_dir=str(tmp_path / "runs"))
    spec["budget"]["n_trials"] = 3
    spec["quality"] = {"enabled": False}  # its loops are scripted: no server answers
    return write_yaml(tmp_path / "study.yaml", spec)


def plan_of(spec_path: Path, gpu: str | None = None) -> planner.Plan:
    target = offline_study(load_spec(spec_path), spec_path, gpu=gpu, engine=None)
    return planner.make_plan(target)


# ---------------------------------------------------------------- the plan


def test_a_plan_covers_every_configuration_with_a_rule_or_a_prediction(tmp_path: Path):
    plan = plan_of(small_spec(tmp_path))
    assert len(plan.configs) == 3 * 2 * 2 * 2 * 2
    blackwell_only = [c for c in plan.configs if c["moe_backend"] == "flashinfer_trtllm"]
    assert all("runs on blackwell, not hopper" in plan.rule_reasons[plan.configs.index(c)]
               for c in blackwell_only)
    assert len(plan.modeled) == len(plan.configs) - len(blackwell_only)
    assert plan.prediction.tok_s_per_gpu.shape == (len(plan.modeled), 4)


def test_tp1_at_a_low_memory_fraction_cannot_fit_and_says_why(tmp_path: Path):
    plan = plan_of(small_spec(tmp_path))
    reasons = {config_key(plan.params(m)): plan.memory_reason(m)
               for m in range(len(plan.modeled))}
    for key, reason in reasons.items():
        config = dict(eval(key))  # noqa: S307  (our own repr of sorted items)
        if config["tensor_parallel_size"] == 1 and config["gpu_memory_fraction"] == 0.4:
            assert reason.startswith("weights 65.2 GB")
            assert "exceed the memory fraction 0.4 of 141 GB" in reason
        else:
            assert reason is None, config
    check = plan.fit_check()
    assert "exceed" in check({**plan.params(0), "gpu_memory_fraction": 0.4})
    assert check({**plan.params(0), "gpu_memory_fraction": 0.9}) is None


def test_the_pareto_front_holds_only_undominated_points_that_fit(tmp_path: Path):
    plan = plan_of(small_spec(tmp_path, gpu="H200"))
    p = plan.prediction
    front = plan.front()
    assert len(front) >= 3
    xs = p.tok_s_per_gpu[p.level_fits]
    ys = p.tok_s_per_user[p.level_fits]
    for m, j in front:
        assert p.level_fits[m, j]
        x, y = p.tok_s_per_gpu[m, j], p.tok_s_per_user[m, j]
        assert not np.any((xs >= x) & (ys >= y) & ((xs > x) | (ys > y)))


def test_ranking_follows_the_studys_objective_under_the_sla(tmp_path: Path):
    plan = plan_of(small_spec(tmp_path, gpu="H200"))
    ranked = plan.ranked()
    objective = plan.objective
    assert list(objective[ranked]) == sorted(objective[ranked], reverse=True)
    best = ranked[0]
    assert plan.meets_sla[best].any()
    j = int(np.argmax(np.where(plan.meets_sla[best], plan.prediction.tok_s_per_gpu[best], 0)))
    assert plan.prediction.tok_s_per_user[best, j] >= plan.sla.min_tok_s_per_user_p90
    assert plan.prediction.ttft_p90_ms[best, j] <= plan.sla.ttft_p90_ms


def test_warm_start_picks_skip_configurations_the_model_cannot_tell_apart(tmp_path: Path):
    plan = plan_of(small_spec(tmp_path, gpu="H200"))
    picked = planner.top_distinct(plan, 4)
    signatures = {tuple(np.round(plan.prediction.tok_s_per_gpu[m], 3)) for m in picked}
    assert len(signatures) == len(picked) == 4
    assert picked[0] == plan.ranked()[0]



def test_the_warm_start_prefers_configurations_whose_band_reaches_the_sla(tmp_path: Path):
    plan = plan_of(small_spec(tmp_path, gpu="H200"))
    assert np.all(plan.reaches_sla >= plan.meets_sla)  # a band reaches what its point meets
    # An SLA just above every point prediction of per-user speed: no level is predicted to meet
    # it, but the bands of the fastest still reach it, and the warm start tries those first.
    fastest = float(np.max(np.where(plan.meets_sla, plan.prediction.tok_s_per_user,
                                    0)))
    strict = dataclasses.replace(plan, sla=SLA(ttft_p90_ms=plan.sla.ttft_p90_ms,
                                               min_tok_s_per_user_p90=fastest * 1.05))
    assert not strict.meets_sla.any() and strict.reaches_sla.any()
    picked = planner.top_distinct(strict, 3, by_band=True)
    assert strict.reaches_sla[picked[0]].any()
    assert not strict.objective.any()  # the point objective alone could not tell them apart
    ranked = strict.ranked(by_band=True)
    assert list(strict.reachable[ranked]) == sorted(strict.reachable[ranked], reverse=True)


def test_a_given_acceptance_rate_replaces_the_fitted_one_for_speculative_configurations(
        tmp_path: Path):
    target = offline_study(load_spec(EXAMPLE), EXAMPLE, gpu="H200", engine=None)
    screened = planner.screen(target)
    low = planner.make_plan(target, screened=screened, acceptance=0.2)
    high = planner.make_plan(target, screened=screened, acceptance=0.8)
    spec_rows = [m for m in range(len(low.modeled))
                 if low.params(m).get("speculative_method", "none") != "none"]
    speculative = set(spec_rows)
    plain = [m for m in range(len(low.modeled)) if m not in speculative]
    assert spec_rows and plain
    assert np.all(high.prediction.tok_s_per_user[spec_rows]
                  > low.prediction.tok_s_per_user[spec_rows])
    assert np.allclose(high.prediction.tok_s_per_user[plain],
                       low.prediction.tok_s_per_user[plain])
    assert any("acceptance rate 80% (--acceptance)" in line
               for line in planner.summary_lines(high))


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_export_writes_every_configuration_and_level(tmp_path: Path, suffix: str):
    plan = plan_of(small_spec(tmp_path))
    path = tmp_path / f"plan{suffix}"
    n = planner.export(plan, path)
    rule_rows = len(plan.configs) - len(plan.modeled)
    assert n == rule_rows + 4 * len(plan.modeled)
    if suffix == ".json":
        doc = json.loads(path.read_text())
        assert doc["source"] == "perfmodel" and doc["gpu_type"] == "H200"
        rows = doc["rows"]
    else:
        with open(path) as fh:
            rows = list(csv.DictReader(fh))
        assert set(SMALL_SPACE["parameters"]) <= set(rows[0])
    assert len(rows) == n
    assert sum(1 for r in rows if r["reason"] and "exceed" in str(r["reason"])) == 4 * 4


def test_a_cpu_spec_cannot_be_planned(tmp_path: Path):
    proc = call_tuner("plan", str(small_spec(tmp_path, gpu="cpu")), cwd=tmp_path)
    assert proc.code == 2
    assert "datasheet figures" in proc.stderr and "--gpu" in proc.stderr


# ---------------------------------------------------------------- the command


def test_plan_on_h100_marks_what_cannot_fit_and_prints_front_and_candidates(tmp_path: Path):
    proc = call_tuner("plan", str(EXAMPLE), "--gpu", "H100-SXM", "--export",
                      str(tmp_path / "plan.csv"), cwd=tmp_path)
    assert proc.code == 0, proc.stderr
    out = proc.stdout
    assert "46,080 configurations: 23,520 break an engine rule" in out
    assert "at c=256" in out and "do not fit, e.g. tp=1 dp=1" in out
    assert "KV cache for" in out and "of 80 GB" in out
    assert "predicted Pareto front" in out and "top 10 candidates" in out
    assert "80% band" in out and "TTFT band" in out
    assert "bands (80%): tok/s per GPU x/÷" in out
    with open(tmp_path / "plan.csv") as fh:
        rows = list(csv.DictReader(fh))
    unfit = [r for r in rows if r["fits"] == "False" and r["concurrency"] == "256"
             and r["tensor_parallel_size"] == "1" and r["data_parallel_size"] == "1"]
    assert unfit and all("KV cache for" in r["reason"] for r in unfit)


def test_plan_on_h100_ranks_nothing_vllms_recipe_says_runs_out_of_memory():
    """The recipe: gpt-oss-120b on one H100 needs memory fraction 0.95 and 1024 batched tokens;
    one rank holds every weight at TP1 without expert parallelism (any DP)."""
    plan = plan_of(EXAMPLE, "H100-SXM")
    ranked = [plan.params(m) for m in plan.ranked()]
    whole_model = [c for c in ranked
                   if c["tensor_parallel_size"] == 1 and not c["enable_expert_parallel"]]
    assert whole_model  # TP1 is planned, at the recipe's settings
    assert all(c["gpu_memory_fraction"] >= 0.95 and c["max_num_tokens"] <= 1024
               for c in whole_model)
    refused = [r for c, r in zip(plan.configs, plan.rule_reasons, strict=True)
               if c["tensor_parallel_size"] == 1 and not c["enable_expert_parallel"]
               and c["gpu_memory_fraction"] == 0.9 and c["moe_backend"] == "triton"]
    assert refused and all("vLLM's recipe" in r for r in refused)


def test_plan_stores_predictions_apart_from_measurements(tmp_path: Path):
    spec_path = small_spec(tmp_path)
    url = f"sqlite:///{tmp_path / 'plans.db'}"
    proc = call_tuner("plan", str(spec_path), "--storage", url, "--study", "mine", cwd=tmp_path)
    assert proc.code == 0, proc.stderr
    # 24 configurations pass the engine rules on Hopper, each at 4 concurrency levels.
    assert "stored 96 predictions (source perfmodel) under study mine" in proc.stdout
    with Store.open(url, create=False) as store:
        stored = store.predictions("mine")
        assert len(stored) == 96 and {p.source for p in stored} == {"perfmodel"}
        assert store.list_studies() == [] and store.trials("mine") == []
    # Planning again replaces, never duplicates.
    assert call_tuner("plan", str(spec_path), "--storage", url, "--study", "mine",
                      cwd=tmp_path).code == 0
    with Store.open(url, create=False) as store:
        assert len(store.predictions("mine")) == 96


# ---------------------------------------------------------------- the store


def test_saved_predictions_replace_the_stored_levels_of_the_same_configuration(tmp_path: Path):
    row = {"config_key": "k1", "params": {"tensor_parallel_size": 1}, "concurrency": 8,
           "fits": True, "output_tok_s_per_gpu": 100.0, "tok_s_per_user": 50.0, "ttft_ms": 20.0,
           "meets_sla": True, "reason": None}
    scope = dict(source="perfmodel", engine="vllm", gpu_type="H200", calibration="test")
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        store.save_predictions("s", [row, {**row, "concurrency": 64}], **scope)
        store.save_predictions("s", [{**row, "output_tok_s_per_gpu": 120.0},
                                     {**row, "config_key": "k2"}], **scope)
        got = {(p.config_key, p.concurrency): p.output_tok_s_per_gpu
               for p in store.predictions("s")}
        assert got == {("k1", 8): 120.0, ("k2", 8): 100.0}
        store.save_predictions("s", [row], **scope, replace_all=True)
        assert len(store.predictions("s")) == 1
        assert store.predictions("s", source="other") == []


def test_a_database_of_the_first_schema_upgrades_and_keeps_its_studies(tmp_path: Path):
    from alembic import command

    from tuner.store.bootstrap import _alembic_config, _parse_url, _sqlite_migration_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = _sqlite_migration_engine(_parse_url(url))
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0001")
    engine.dispose()
    with Store.open(url) as store:  # 0001 -> head
        store.ensure_study("old", engine="vllm", model="m", gpu_type="H200", spec={}, space={},
                           tuner_version="0")
    with Store.open(url, create=False) as store:
        assert [s.name for s in store.list_studies()] == ["old"]
        assert store.predictions("old") == []


def test_feasibility_checks_run_after_the_engine_rules_and_the_old_call_still_works():
    vllm, h200 = get_adapter("vllm"), gpu_type("H200")
    kwargs = dict(shape=shape_by_name("gpt-oss-120b"), devices=8, adapter=vllm, gpu=h200,
                  settings=engine_settings(load_spec(EXAMPLE), "vllm", "m"))
    calls = []

    def check(config):
        calls.append(config)
        return "the model says no"

    assert infeasibility({"tensor_parallel_size": 2}, **kwargs) is None
    assert infeasibility({"tensor_parallel_size": 2}, **kwargs, checks=[check]) \
        == "the model says no"
    assert "runs on blackwell" in infeasibility({"moe_backend": "flashinfer_trtllm"}, **kwargs,
                                                checks=[check])
    assert len(calls) == 1  # not consulted once an engine rule has said no


# ---------------------------------------------------------------- warm start in a study


def _context(spec_path: Path, said: list[str]) -> StudyContext:
    spec = load_spec(spec_path)
    gpu = gpu_type(spec.hardware.gpu_type)
    adapter = get_adapter(spec.engine.name)
    return StudyContext(
        spec=spec, name=spec.name, space=load_space(spec_path.parent / "space.yaml", "vllm", gpu),
        adapter=adapter, inventory=planned_inventory(gpu, 8), shape=shape_by_name("gpt-oss-120b"),
        settings=engine_settings(spec, "vllm", spec.model.path),
        store=Store.open(spec.storage), storage_url=spec.storage, runs_dir=spec_path.parent,
        say=said.append, gpu=gpu)


def test_warm_start_runs_the_models_top_picks_first_and_never_launches_what_cannot_fit(
        tmp_path: Path, monkeypatch):
    spec_path = small_spec(tmp_path)
    said: list[str] = []
    ctx = _context(spec_path, said)
    launched: list[dict] = []

    def fake_trial(ctx, study, trial, params, devices=None):
        launched.append(params)
        trial_id = ctx.store.start_trial(ctx.name, trial.number, params, worker_host="h",
                                         worker_pid=1)
        ctx.store.finish_trial(trial_id, state="complete", objective=1000.0, meets_sla=True)
        study.tell(trial, 1000.0)
        return TrialResult(trial.number, params, "complete", 1000.0, True)

    monkeypatch.setattr(loop, "run_trial", fake_trial)
    # Someone queued a configuration that cannot fit: it must be rejected, not launched.
    cannot_fit = {"tensor_parallel_size": 1, "moe_backend": "triton", "max_batch_size": 16,
                  "kv_cache_dtype": "auto", "gpu_memory_fraction": 0.4}
    load_or_create_study(ctx).enqueue_trial(cannot_fit)
    expected = planner.make_plan(offline_study(ctx.spec, spec_path, gpu=None, engine=None))
    top = [expected.params(m) for m in planner.top_distinct(expected, 2, by_band=True)]

    loop.run_study(ctx, n_trials=3,
                   warm_start=planner.warm_start(ctx, 2, store=ctx.store, study_name=ctx.name))

    assert launched[:2] == top
    assert cannot_fit not in launched
    records = {r.number: r for r in ctx.store.trials(ctx.name)}
    rejected = [r for r in records.values() if r.params == cannot_fit]
    assert rejected and rejected[0].state == "infeasible"
    assert "exceed the memory fraction 0.4 of 141 GB" in rejected[0].failure_reason
    assert any("warm start: the performance model queued 2" in line for line in said)
    stored = ctx.store.predictions(ctx.name, source="perfmodel")
    assert len(stored) == 2 * 4 and {p.params == top[0] for p in stored} == {True, False}
    assert all(t.measurements == [] for t in records.values())  # predictions stay predictions
    ctx.store.close()


# ---------------------------------------------------------------- calibration to a study


def _level(concurrency: int, per_gpu: float, per_user: float, ttft: float = 100.0,
           ttft_p90: float = 150.0, ttft_p99: float | None = None) -> LevelMeasurement:
    return LevelMeasurement(
        concurrency=concurrency, requests=64, errors=0, duration_s=60.0, input_tokens=65536,
        output_tokens=65536, request_throughput=1.0, output_tok_s=per_gpu,
        output_tok_s_per_gpu=per_gpu,
        ttft_p50_ms=ttft, ttft_p90_ms=ttft_p90,
        ttft_p99_ms=ttft_p90 * 1.3 if ttft_p99 is None else ttft_p99, itl_p50_ms=10.0,
        itl_p90_ms=12.0, itl_p99_ms=15.0, tpot_p50_ms=10.0, tpot_p90_ms=12.0, e2e_p50_ms=9000.0,
        e2e_p90_ms=9500.0, tok_s_per_user_p50=per_user, tok_s_per_user_p90=per_user * 0.9,
        goodput_rps=1.0, meets_sla=True)


def synthetic_study(url: str, truth: pm.Calibration) -> None:
    """A stored H200 study whose measurements a known calibration produced."""
    spec = load_spec(EXAMPLE)
    space = load_space(REPO / "search_spaces" / "gpt-oss-120b.yaml", "vllm", gpu_type("H200"))
    adapter = get_adapter("vllm")
    configs = [c for c in space.enumerate()
               if c["moe_backend"] == "triton" and c["max_num_tokens"] == 8192
               and c["speculative_method"] == "none" and c["max_batch_size"] == 256
               and not c["enable_expert_parallel"]][:12]
    levels = spec.workload.concurrency
    with Store.open(url) as store:
        store.ensure_study(spec.name, engine="vllm", model=spec.model.path, gpu_type="H200",
                           spec=spec.model_dump(mode="json"), space=space.model_dump(mode="json"),
                           tuner_version="test")
        for n, config in enumerate(configs):
            s = pm.setup_of(config, model=pm.model_facts("gpt-oss-120b"),
                            gpu=pm.gpu_for_model("H200"), engine=pm.facts().engine("vllm"),
                            layout=pm.layout_of(config, adapter), isl=1024, osl=1024)
            p = pm.predict(pm.stack([s]).column(), np.array([levels], dtype=float), truth)
            trial_id = store.start_trial(spec.name, n, config, worker_host="h", worker_pid=1)
            store.finish_trial(trial_id, state="complete", objective=1.0, meets_sla=True,
                               measurements=[_level(c, float(p.tok_s_per_gpu[0, j]),
                                                    float(p.tok_s_per_user[0, j]),
                                                    float(p.ttft_ms[0, j]),
                                                    float(p.ttft_p90_ms[0, j]),
                                                    float(p.ttft_p99_ms[0, j]))
                                             for j, c in enumerate(levels)])


def _errors(stdout: str, label: str) -> list[float]:
    line = next(line for line in stdout.splitlines() if label in line)
    return [float(part.split("%")[0]) for part in line.split("median ")[1:]]


def test_calibrating_to_a_study_reduces_the_error_on_its_measurements(tmp_path: Path):
    shipped = pm.load_calibration()
    truth = pm.Calibration({**shipped.factors, "moe_eff.hopper": 0.3, "bw_eff": 0.55,
                            "step_overhead_ms": 0.8}, "truth", {})
    url = f"sqlite:///{tmp_path / 'study.db'}"
    synthetic_study(url, truth)
    out = tmp_path / "cal.json"
    proc = call_tuner("plan", "--calibrate", "gpt-oss-120b-h200", "--storage", url, "--out",
                      str(out), cwd=tmp_path)
    assert proc.code == 0, proc.stderr
    median = _errors(proc.stdout, "error before") + _errors(proc.stdout, "error after")
    assert median[0] > 10 and median[1] < 2
    held_out = _errors(proc.stdout, "held-out trials (12")
    assert held_out[1] < held_out[0]
    refit = pm.load_calibration(out)
    assert refit.summary["median_abs_error_after"] < refit.summary["median_abs_error_before"]
    # The refit file is what a later plan uses, with bands from its held-out errors.
    with Store.open(url, create=False) as store:
        obs = study_fit.study_observations(store.get_study("gpt-oss-120b-h200"),
                                           store.trials("gpt-oss-120b-h200"))
    assert len(obs) == 12 * 4 * 5  # tok/s per GPU, per user, TTFT median, p90, p99 per level
    assert np.median(np.abs(pm.errors(obs, refit))) < 0.02
    assert refit.summary["bands"]["ttft"]["rows"] == 12 * 4 * 2
    assert refit.summary["bands"]["ttft_p99"]["rows"] == 12 * 4


TINY_STUDY = json.loads((Path(__file__).parent / "data" / "tiny_cpu_study.json").read_text())


def tiny_cpu_study(url: str) -> str:
    """The tiny CPU demo study's stored levels (tests/plan/data/tiny_cpu_study.json: copied from
    a real run on 2 shared cores) in a fresh store; returns the study's name."""
    spec, levels = TINY_STUDY["spec"], TINY_STUDY["levels"]
    fields = {f for f in LevelMeasurement.__dataclass_fields__}
    with Store.open(url) as store:
        store.ensure_study(spec["name"], engine="vllm", model=spec["model"]["path"],
                           gpu_type="cpu", spec=spec, space=TINY_STUDY["space"],
                           tuner_version="test")
        for number in sorted({lv["trial"] for lv in levels}):
            mine = [lv for lv in levels if lv["trial"] == number]
            trial_id = store.start_trial(spec["name"], number, mine[0]["params"],
                                         worker_host="h", worker_pid=1)
            store.finish_trial(trial_id, state=mine[0]["state"], objective=1.0, meets_sla=True,
                               measurements=[LevelMeasurement(**{k: v for k, v in lv.items()
                                                                 if k in fields})
                                             for lv in mine])
    return spec["name"]


def test_calibrating_to_the_tiny_cpu_study_lowers_the_error_on_its_held_out_trials(
        tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'tiny.db'}"
    name = tiny_cpu_study(url)
    out = tmp_path / "tiny.json"
    proc = call_tuner("plan", "--calibrate", name, "--storage", url, "--out", str(out),
                      cwd=tmp_path)
    assert proc.code == 0, proc.stderr
    before, after = _errors(proc.stdout, "held-out trials (3")
    assert after < before
    assert "measured ngram acceptance rate" in proc.stdout
    summary = pm.load_calibration(out).summary
    assert summary["held_out_trials"] == 3
    assert summary["held_out_median_abs_error_after"] < summary[
        "held_out_median_abs_error_before"]


def test_the_tiny_cpu_studys_trials_refit_the_model_as_they_land(tmp_path: Path):
    """The closed loop: after each trial lands, the model refitted to the trials so far
    predicts the trials still to come better than the model it started from."""
    url = f"sqlite:///{tmp_path / 'tiny.db'}"
    name = tiny_cpu_study(url)
    with Store.open(url, create=False) as store:
        numbered = study_fit.trial_observations(store.get_study(name), store.trials(name))
    loop = study_fit.closed_loop(numbered, pm.load_calibration())
    assert [p.landed for p in loop] == [0, 1, 2]
    assert loop[0].observations > loop[1].observations > loop[2].observations > 0
    assert loop[-1].median_abs_error < loop[0].median_abs_error / 2


def test_a_refit_names_each_factor_it_moved_with_what_it_explains():
    start = pm.load_calibration()
    moved = pm.Calibration({**start.factors, "admit_steps.vllm": 2.0}, "test", {})
    (line,) = study_fit.factor_lines(start, moved)
    assert line.startswith(f"admit_steps.vllm: {start['admit_steps.vllm']:.4g} -> 2 (")
    assert "steps a new request waits" in line


def test_calibrating_a_study_that_does_not_exist_is_bad_input(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    Store.open(url).close()
    proc = call_tuner("plan", "--calibrate", "nope", "--storage", url, cwd=tmp_path)
    assert proc.code == 2 and "no such study" in proc.stderr


def test_optuna_enqueued_warm_start_trials_are_not_queued_twice_on_resume(tmp_path: Path):
    plan = plan_of(small_spec(tmp_path, gpu="H200"))
    study = optuna.create_study(direction="maximize")
    store_url = f"sqlite:///{tmp_path / 'w.db'}"
    with Store.open(store_url) as store:
        target = offline_study(load_spec(tmp_path / "study.yaml"), tmp_path / "study.yaml",
                               gpu=None, engine=None)
        warm = planner.warm_start(target, 3, store=store, study_name="w")
        for _ in range(2):  # a study resumed: the same configurations are offered again
            checks: list = []
            ctx = SimpleNamespace(run=SimpleNamespace(add_check=checks.append),
                                  say=lambda line: None)
            loop.queue_warm_start(ctx, study, warm, done=set())
        assert len(study.get_trials(states=(optuna.trial.TrialState.WAITING,))) == 3
        assert len(store.predictions("w")) == 3 * len(plan.levels)
