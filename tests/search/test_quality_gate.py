"""The quality gate in a real study against the fake engine: the reference answers once per
study, every trial's own server answering the same prompts after its measurement, and what a
configuration that answers wrongly gets: a `quality` failure, told to the sampler, never the
winner, never exported."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import optuna
import yaml

from tests.conftest import TUNER, base_spec, call_tuner, write_yaml
from tuner.measure.metrics import UNUSABLE_VIOLATION
from tuner.store import Store
from tuner.testing.fake_engine import fake_engine_section, fake_model

# Batch 16 is fast and answers wrongly (a configuration that breaks the model); batch 4 is slow
# and right. The reference (the engine's defaults) answers as batch 4 does.
LANDSCAPE = {"default": {"ttft_s": 0.01, "itl_s": 0.004},
             "rules": [{"match": {"max-num-seqs": 16}, "ttft_s": 0.002, "itl_s": 0.0005,
                        "answers": "wrong"}]}
QUALITY = {"prompts": 8, "max_tokens": 4, "concurrency": 4, "input_len": 8}


def study_dir(tmp_path: Path, landscape: dict = LANDSCAPE, n_trials: int = 2) -> Path:
    (tmp_path / "landscape.json").write_text(json.dumps(landscape))
    write_yaml(tmp_path / "space.yaml", {"name": "batch", "engine": "vllm", "parameters": {
        "max_batch_size": {"values": [4, 16]}}})
    spec = base_spec(fake_model(tmp_path / "model"), space="space.yaml",
                     hardware={"gpu_type": "cpu", "devices": 1},
                     workload={"input_len": 8, "output_len": 8, "concurrency": [2],
                               "requests_per_level": 8, "warmup_requests": 1},
                     sla={"ttft_p90_ms": 1000}, sampler={"name": "grid"},
                     budget={"n_trials": n_trials, "trial_timeout_s": 60, "confirm_top_k": 0},
                     quality=QUALITY)
    spec["engine"] = fake_engine_section(tmp_path, ready_timeout_s=10)
    write_yaml(tmp_path / "study.yaml", spec)
    return tmp_path


def _store(d: Path) -> Store:
    return Store.open(f"sqlite:///{d / 'tuner.db'}", create=False)


def reference_runs(d: Path) -> list[Path]:
    """The run directories of reference servers: one per reference computed."""
    return sorted((d / "tuner-runs" / "test-study").glob("reference-*"))


def test_the_correct_slow_configuration_wins_and_the_wrong_fast_one_is_a_quality_failure(
        tmp_path):
    d = study_dir(tmp_path)
    run = call_tuner("run", "study.yaml", cwd=d)
    assert run.code == 0, run.stdout[-3000:] + run.stderr
    assert "quality: reference answers from the engine defaults" in run.stdout
    assert "quality: matches the reference (8 identical, 0 near-ties, 0 diverging of 8" in \
        run.stdout
    assert "failed (quality): 8 of 8 answers diverge" in run.stdout

    with _store(d) as store:
        trials = {t.params["max_batch_size"]: t for t in store.trials("test-study")}
        reference = store.reference("test-study")
    wrong, right = trials[16], trials[4]
    assert (wrong.state, wrong.failure_kind) == ("failed", "quality")
    assert wrong.quality.exact_match_rate == 0.0 and wrong.quality.common_prefix_share == 0.0
    assert (wrong.quality.identical, wrong.quality.diverging) == (0, 8)
    assert wrong.quality.rule.startswith("tie-aware: ")
    assert wrong.quality.flips["first_divergence"]["prompt"] == 0
    assert not wrong.quality.passed and wrong.quality.gate_s > 0
    assert "first difference: prompt 0, token 0: reference" in wrong.failure_reason
    assert wrong.measurements and wrong.objective is not None  # its speed is kept, as measured
    assert right.state == "complete" and right.quality.passed
    assert right.quality.exact_match_rate == 1.0 and right.quality.mean_logprob_divergence == 0
    assert reference.state == "ready" and len(reference.answers) == QUALITY["prompts"]

    study = optuna.load_study(study_name="test-study", storage=f"sqlite:///{d / 'tuner.db'}")
    told = next(t for t in study.trials if t.params.get("max_batch_size") == 16)
    assert told.constraints == {"failed": UNUSABLE_VIOLATION}  # as any failure

    best = call_tuner("best", cwd=d)
    assert best.code == 0 and f"trial {right.number}" in best.stdout
    assert "quality against the reference: passed: 8 identical, 0 near-ties, 0 diverging of 8" \
        in best.stdout

    refused = call_tuner("export", "--trial", str(wrong.number), "--out", "wrong", cwd=d)
    assert refused.code == 2 and not (d / "wrong").exists()
    assert len(refused.stderr.strip().splitlines()) == 1
    assert refused.stderr.startswith(f"error: export of trial {wrong.number} refused: it failed "
                                     "the quality gate (8 of 8 answers diverge")

    exported = call_tuner("export", "--format", "json", "--out", "best", cwd=d)
    assert exported.code == 0, exported.stderr
    record = json.loads((d / "best" / "best.json").read_text())
    assert record["trial"] == right.number and record["schema_version"] == 8
    assert record["quality"]["passed"] and record["quality"]["exact_match_rate"] == 1.0
    assert (record["quality"]["identical"], record["quality"]["near_ties"],
            record["quality"]["diverging"]) == (8, 0, 0)


def test_the_reference_is_computed_once_per_study_and_survives_a_resume(tmp_path):
    d = study_dir(tmp_path, {"default": {"ttft_s": 0.01, "itl_s": 0.004}})  # both answer right
    first = call_tuner("run", "study.yaml", "--n-trials", "1", cwd=d)
    assert first.code == 0, first.stdout[-3000:] + first.stderr
    with _store(d) as store:
        before = store.reference("test-study")

    again = call_tuner("run", "study.yaml", "--n-trials", "2", cwd=d)
    assert again.code == 0, again.stdout[-3000:] + again.stderr
    assert "reference answers from" not in again.stdout
    with _store(d) as store:
        after = store.reference("test-study")
        trials = [t for t in store.trials("test-study") if t.state != "infeasible"]
    assert after == before and len(reference_runs(d)) == 1
    assert len(trials) == 2 and all(t.quality is not None for t in trials)


def test_workers_on_one_study_share_one_reference(tmp_path):
    # The reference server answers slowly enough that the second worker may find it computing.
    landscape = {"default": {"ttft_s": 0.2, "itl_s": 0.01}}
    d = study_dir(tmp_path, landscape)
    url = f"sqlite:///{d / 'tuner.db'}"
    created = call_tuner("run", "study.yaml", "--create-only", "--storage", url, cwd=d)
    assert created.code == 0, created.stderr
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TUNER_STORAGE": url}
    outs = [open(d / f"w{i}.out", "w") for i in range(2)]  # noqa: SIM115 (the children write)
    workers = [subprocess.Popen([*TUNER, "worker", "--study", "test-study"], cwd=d, env=env,
                                stdout=out, stderr=subprocess.STDOUT) for out in outs]
    try:
        codes = [w.wait(timeout=120) for w in workers]
    finally:
        for w, out in zip(workers, outs, strict=True):
            if w.poll() is None:
                w.kill()
            out.close()
    texts = [(d / f"w{i}.out").read_text() for i in range(2)]
    assert codes == [0, 0], texts
    assert sum("quality: reference answers from" in t for t in texts) == 1
    assert len(reference_runs(d)) == 1
    with _store(d) as store:
        trials = [t for t in store.trials("test-study") if t.state != "infeasible"]
    assert len(trials) == 2
    assert all(t.quality is not None and t.quality.passed for t in trials)


def test_task_checks_fail_a_configuration_that_answers_them_wrongly(tmp_path):
    from tuner.testing.fake_openai_server import answer

    d = study_dir(tmp_path, n_trials=2)
    prompts = ["What is two and two?", "Name a colour."]
    # The right answers are what a correct server says to each (the fake answers from the prompt).
    lines = [json.dumps({"prompt": p, "answer": answer({"prompt": p}, False, 6)["choices"][0]
                         ["text"]}) for p in prompts]
    (d / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    spec = yaml.safe_load((d / "study.yaml").read_text())
    # Only the tasks judge here: the reference comparison lets anything pass.
    spec["quality"].update(max_diverging=1, max_logprob_divergence=1e9,
                           tasks={"file": "tasks.jsonl", "max_tokens": 6, "min_accuracy": 1})
    write_yaml(d / "study.yaml", spec)
    run = call_tuner("run", "study.yaml", cwd=d)
    assert run.code == 0, run.stdout[-3000:] + run.stderr
    with _store(d) as store:
        trials = {t.params["max_batch_size"]: t for t in store.trials("test-study")}
    assert trials[4].quality.task_accuracy == 1.0 and trials[4].state == "complete"
    assert trials[16].quality.task_accuracy == 0.0
    assert (trials[16].state, trials[16].failure_kind) == ("failed", "quality")
    assert trials[16].failure_reason.startswith("task accuracy 0% on tasks.jsonl (needs 100%)")


def test_a_task_file_that_cannot_be_read_is_refused_before_anything_runs(tmp_path):
    d = study_dir(tmp_path)
    spec = yaml.safe_load((d / "study.yaml").read_text())
    spec["quality"]["tasks"] = {"file": "missing.jsonl"}
    write_yaml(d / "study.yaml", spec)
    run = call_tuner("run", "study.yaml", cwd=d)
    assert run.code == 2 and "quality.tasks.file: file" in run.stderr
    assert not (d / "tuner.db").exists()


def test_speculation_is_held_to_exact_match_only_where_the_numerics_are_the_references():
    from types import SimpleNamespace

    from tuner.search.quality_gate import lossless_feature, other_numerics
    from tuner.spec.quality_spec import QualitySpec

    ctx = SimpleNamespace(spec=SimpleNamespace(quality=QualitySpec()))
    ngram = {"speculative_method": "ngram", "num_speculative_tokens": 2, "max_batch_size": 16}
    assert lossless_feature(ctx, {**ngram, "tensor_parallel_size": 1}) == \
        "speculative_method=ngram"
    assert other_numerics(ctx, {**ngram, "tensor_parallel_size": 1}) is None
    assert other_numerics(ctx, ngram) is None  # TP1 is the default
    # Another rank layout or KV-cache dtype reduces and rounds otherwise: the tie-aware rule,
    # not exact match, judges it (tuner.measure.quality_compare.gate_rule).
    assert other_numerics(ctx, {**ngram, "tensor_parallel_size": 2}) == "tensor_parallel_size=2"
    assert other_numerics(ctx, {**ngram, "kv_cache_dtype": "fp8"}) == "kv_cache_dtype=fp8"
    assert lossless_feature(ctx, {"speculative_method": "none"}) is None
    # A reference on two ranks holds TP2 with speculation to exact match again.
    ctx.spec.quality = QualitySpec(reference={"tensor_parallel_size": 2})
    assert other_numerics(ctx, {**ngram, "tensor_parallel_size": 2}) is None
    assert other_numerics(ctx, ngram) == "tensor_parallel_size=1"
