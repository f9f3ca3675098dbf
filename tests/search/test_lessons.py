"""What a failed trial teaches the search: a cause the engine's rules know implicates its values
(vLLM's CPU build has no all_gatherv: every data-parallel configuration), an unknown cause the
failed configuration's structural values (not its sizes); a configuration matching a lesson is
skipped before launch, naming the trial it follows, unless the spec turns learning off."""

from __future__ import annotations

import json
from types import SimpleNamespace

import yaml

from tests.conftest import base_spec, call_tuner, write_yaml
from tests.fake_engine import LANDSCAPE_ENV, fake_model, fake_vllm
from tuner.search.lessons import lessons, ruled_out
from tuner.store import Store

DP2_UNSUPPORTED = ("unsupported: NotImplementedError in all_gatherv "
                   "(base_device_communicator.py:296)")


def failed(number: int, params: dict, kind: str, reason: str):
    return SimpleNamespace(number=number, state="failed", params=params, failure_kind=kind,
                           failure_reason=reason)


def test_a_known_unsupported_cause_rules_out_every_configuration_sharing_its_values():
    dp2 = failed(4, {"tensor_parallel_size": 1, "data_parallel_size": 2,
                     "enable_expert_parallel": True, "max_batch_size": 64},
                 "unsupported", DP2_UNSUPPORTED.split(": ", 1)[1])
    (lesson,) = lessons([dp2], "vllm")
    assert lesson.known and lesson.values == {"data_parallel_size": {"min": 2}}
    # Another DP2 configuration (expert parallel off, another batch) is ruled out too ...
    other = {"tensor_parallel_size": 1, "data_parallel_size": 2, "enable_expert_parallel": False,
             "max_batch_size": 16}
    assert ruled_out(other, [lesson]) is lesson
    assert lesson.text() == ("skipped: follows trial 4 (unsupported: NotImplementedError in "
                             "all_gatherv (base_device_communicator.py:296)): "
                             "data_parallel_size >= 2")
    # ... and DP1 (stated or left out) is not.
    assert ruled_out({"data_parallel_size": 1}, [lesson]) is None
    assert ruled_out({"tensor_parallel_size": 2}, [lesson]) is None


def test_an_unknown_crash_rules_out_its_structural_values_whatever_the_sizes():
    crash = failed(1, {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
                       "max_batch_size": 4, "max_num_tokens": 512},
                   "crash", "Segfault encountered in some_kernel (kernel.cpp:12)")
    (lesson,) = lessons([crash], "vllm")
    assert not lesson.known
    assert lesson.values["tensor_parallel_size"] == 2 and lesson.values["kv_cache_dtype"] == "fp8"
    assert "max_batch_size" not in lesson.values
    assert ruled_out({"tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
                      "max_batch_size": 64}, [lesson]) is lesson
    assert ruled_out({"tensor_parallel_size": 2, "kv_cache_dtype": "auto",
                      "max_batch_size": 4}, [lesson]) is None


def test_failures_that_name_no_lasting_cause_teach_nothing():
    transient = [failed(0, {"tensor_parallel_size": 2}, kind, "x")
                 for kind in ("timeout", "not_ready", "request_errors", "quality", "oom")]
    assert lessons(transient, "vllm") == []


def _study(tmp_path, learn: bool):
    (tmp_path / "landscape.json").write_text(json.dumps({
        "default": {"ttft_s": 0.01, "itl_s": 0.004},
        "rules": [{"match": {"tensor-parallel-size": 2}, "fail": "crash"}]}))
    # TP2 with expert parallel crashes as vLLM's CPU build does (the fake's segfault line is
    # its fused-MoE kernel's): a cause the engine's rules know.
    write_yaml(tmp_path / "space.yaml", {"name": "tp", "engine": "vllm", "parameters": {
        "tensor_parallel_size": {"values": [2, 1]},
        "enable_expert_parallel": {"values": [True], "when": {"tensor_parallel_size": 2}},
        "max_batch_size": {"values": [4, 16]}}})
    spec = base_spec(fake_model(tmp_path / "model"), space="space.yaml",
                     hardware={"gpu_type": "cpu", "devices": 2},
                     workload={"input_len": 8, "output_len": 8, "concurrency": [2],
                               "requests_per_level": 8, "warmup_requests": 1},
                     sla={"ttft_p90_ms": 1000}, sampler={"name": "grid"},
                     budget={"n_trials": 4, "trial_timeout_s": 60, "confirm_top_k": 0,
                             "learn_from_failures": learn})
    spec["engine"] = {"name": "vllm", "executable": str(fake_vllm(tmp_path / "bin")),
                      "ready_timeout_s": 10,
                      "env": {LANDSCAPE_ENV: str(tmp_path / "landscape.json")}}
    write_yaml(tmp_path / "study.yaml", spec)
    run = call_tuner("run", "study.yaml", cwd=tmp_path)
    assert run.code == 0, run.stdout[-3000:] + run.stderr
    with Store.open(f"sqlite:///{tmp_path / 'tuner.db'}", create=False) as store:
        return run.stdout, store.trials("test-study")


def test_a_study_pays_a_crash_once_and_skips_what_shares_its_cause(tmp_path):
    out, trials = _study(tmp_path, learn=True)
    crashed = [t for t in trials if t.state == "failed"]
    assert len(crashed) == 1 and crashed[0].failure_kind == "crash"
    skipped = [t for t in trials if t.failure_reason and t.failure_reason.startswith("skipped")]
    assert [t.params["tensor_parallel_size"] for t in skipped] == [2]
    assert skipped[0].state == "infeasible"  # rejected before launch: no server
    assert f"follows trial {crashed[0].number} (crash: " in skipped[0].failure_reason
    # Every configuration launched after the crash is one its cause did not rule out.
    launched = [t for t in trials if t.state != "infeasible"]
    assert all(t.params["tensor_parallel_size"] == 1 for t in launched
               if t.number > crashed[0].number)
    assert sum(t.state == "complete" for t in trials) == 2
    assert "skipped: follows trial" in out


def test_the_spec_can_turn_learning_off(tmp_path):
    _, trials = _study(tmp_path, learn=False)
    assert sum(t.state == "failed" for t in trials) == 2
    assert not any((t.failure_reason or "").startswith("skipped") for t in trials)


def test_the_spec_field_is_documented_in_the_schema():
    from tuner.spec.study_spec import BudgetSpec

    assert "unsupported or crash" in BudgetSpec.model_fields["learn_from_failures"].description
    assert yaml.safe_dump({"learn_from_failures": True})
