"""What a failed trial teaches the search: a cause the engine's rules know implicates its values
(vLLM's CPU build has no all_gatherv: every data-parallel configuration), an unknown cause the
failed configuration's structural values (not its sizes); a configuration matching a lesson is
skipped before launch, naming the trial it follows, unless the spec turns learning off."""

from __future__ import annotations

import json
from types import SimpleNamespace

import yaml

from tests.conftest import base_spec, call_tuner, write_yaml
from tuner.search.lessons import lessons, ruled_out
from tuner.store import Store
from tuner.testing.fake_engine import fake_engine_section, fake_model

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


def test_an_unknown_crash_is_learned_from_its_second_failure_as_their_shared_structure():
    reason = "Segfault encountered in some_kernel (kernel.cpp:12)"
    first = failed(1, {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
                       "speculative_method": "ngram", "max_batch_size": 4}, "crash", reason)
    assert lessons([first], "vllm") == []  # once may be anything
    second = failed(3, {"tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
                        "speculative_method": "none", "max_batch_size": 64}, "crash", reason)
    (lesson,) = lessons([first, second], "vllm")
    assert not lesson.known and lesson.trial == 3
    assert lesson.values == {"tensor_parallel_size": 2, "data_parallel_size": 1,
                             "enable_expert_parallel": False, "expert_parallel_size": 1,
                             "enable_attention_dp": False, "kv_cache_dtype": "fp8"}
    assert ruled_out({"tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
                      "max_batch_size": 16}, [lesson]) is lesson
    assert ruled_out({"tensor_parallel_size": 2, "kv_cache_dtype": "auto"}, [lesson]) is None


def test_a_lesson_a_complete_trial_contradicts_teaches_nothing():
    # A known cause whose values a configuration served with (DP2 on a dense model, say) ...
    dp2 = failed(4, {"data_parallel_size": 2}, "unsupported",
                 DP2_UNSUPPORTED.split(": ", 1)[1])
    served = SimpleNamespace(number=5, state="complete", params={"data_parallel_size": 2},
                             failure_kind=None, failure_reason=None)
    assert lessons([dp2, served], "vllm") == []
    # ... and a known cause the failed configuration does not have (the fused-MoE segfault
    # rule is about TP >= 2 with EP; a TP1 crash with that line is learned like an unknown one).
    tp1 = failed(0, {"tensor_parallel_size": 1, "max_batch_size": 8}, "crash",
                 "Segfault encountered in fused_moe_impl (fake_moe.cpp:42)")
    assert lessons([tp1], "vllm") == []


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
    spec["engine"] = fake_engine_section(tmp_path, ready_timeout_s=10)
    write_yaml(tmp_path / "study.yaml", spec)
    run = call_tuner("run", "study.yaml", cwd=tmp_path)
    assert run.code == 0, run.stdout[-3000:] + run.stderr
    with Store.open(f"sqlite:///{tmp_path / 'tuner.db'}", create=False) as store:
        return run.stdout, store.trials("test-study")


def test_a_study_pays_a_crash_once_and_skips_what_shares_its_cause(tmp_path):
    out, trials = _study(tmp_path, learn=True)
    crashed = [t for t in trials if t.state == "failed"]
    assert len(crashed) == 1 and crashed[0].failure_kind == "crash"
    # The other TP2 configuration was never launched, and the run said why.
    launched = [t for t in trials if t.state != "infeasible"]
    assert sorted(t.params["max_batch_size"] for t in launched
                  if t.params["tensor_parallel_size"] == 2) == [crashed[0].params[
                      "max_batch_size"]]
    assert sum(t.state == "complete" for t in trials) == 2
    assert (f"lesson from trial {crashed[0].number}: tensor_parallel_size >= 2, "
            "enable_expert_parallel=True fails alike; 1 configuration(s) of the space skipped "
            "from now on") in out
    # A proposal the lesson rules out is recorded as skipped, naming the trial it follows.
    skipped = [t for t in trials if (t.failure_reason or "").startswith("skipped")]
    for t in skipped:
        assert t.state == "infeasible" and t.params["tensor_parallel_size"] == 2
        assert f"follows trial {crashed[0].number} (crash: " in t.failure_reason


def test_the_spec_can_turn_learning_off(tmp_path):
    _, trials = _study(tmp_path, learn=False)
    assert sum(t.state == "failed" for t in trials) == 2
    assert not any((t.failure_reason or "").startswith("skipped") for t in trials)


def test_the_spec_field_is_documented_in_the_schema():
    from tuner.spec.study_spec import BudgetSpec

    assert "unsupported or crash" in BudgetSpec.model_fields["learn_from_failures"].description
    assert yaml.safe_dump({"learn_from_failures": True})


def test_a_fixed_engine_argument_the_engine_rejected_is_the_specs_fault():
    from tuner.search.lessons import spec_at_fault

    args = {"max-modle-len": 512, "dtype": "bfloat16"}
    reason = "vllm serve: error: unrecognized arguments: --max-modle-len 512"
    assert spec_at_fault("invalid_argument", reason, args) == "max-modle-len"
    assert spec_at_fault("invalid_argument", reason, {"max_modle_len": 512}) == "max_modle_len"
    # A sampled value the engine refused, or another kind of failure: the configuration's.
    assert spec_at_fault("invalid_argument", "error: argument --max-num-seqs: invalid int",
                         args) is None
    assert spec_at_fault("crash", reason, args) is None
    assert spec_at_fault("invalid_argument", None, args) is None
