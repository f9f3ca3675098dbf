"""The tie-aware quality gate on real vLLM (CPU build) servers of the tiny gpt-oss, at the gate's
defaults (32 prompts, 32 tokens, margin and shares as shipped). Marked `engine`.

One study, grid sampler, three trials after the reference (the engine defaults, TP1):
- TP2 reduces in another order and flips near-ties: it passes, with its near-ties counted,
  judged by the tie-aware rule (which rule speculation at other numerics gets is
  tests/measure/test_quality_compare.py's);
- TP1 with n-gram speculation has the reference's numerics: held to identical answers, it is;
  its drafts' acceptance is read from the engine's own counters, and the export says which
  prompts (natural text) it was measured on;
- an FP8 (e5m2) KV cache changes the model's arithmetic: it fails, naming its first divergence
  (on a CPU without AVX-512 or AMX tuner refuses it before launch instead).
Then two more real faults, each served beside the study's stored reference and judged by the
gate's own functions: another RoPE base (`--hf-overrides`: the arithmetic) and a repetition
penalty (`--override-generation-config`: the decoding). Both fail, naming their first divergence.
"""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import base_spec, run_tuner, write_yaml
from tuner.measure.quality import Answer, answer_all, quality_prompts
from tuner.measure.quality_compare import RULE_EXACT, RULE_TIES, compare, gate_rule, shortfalls
from tuner.search.context import resolve_executable
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import cpu_inventory
from tuner.serve.launcher import ServerProcess, free_port
from tuner.spec.model_shape import read_model_shape
from tuner.spec.quality_spec import QualitySpec
from tuner.spec.study_spec import WorkloadSpec
from tuner.store import Store

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]

SPACE = {"name": "quality", "engine": "vllm", "parameters": {
    "tensor_parallel_size": {"values": [1, 2]},
    "speculative_method": {"values": ["none", "ngram"], "when": {"tensor_parallel_size": 1}},
    "num_speculative_tokens": {"values": [2], "when": {"speculative_method": "ngram"}},
    # TP1 without speculation is the reference's own configuration: only its faulty KV cache.
    "kv_cache_dtype": {"values": ["fp8_e5m2"],
                       "when": {"speculative_method": "none", "tensor_parallel_size": 1}},
}}
WORKLOAD = {"prompt_source": "corpus", "input_len": 32, "output_len": 16, "concurrency": [4],
            "requests_per_level": 8, "warmup_requests": 1}


@pytest.fixture(scope="module")
def quality_study(tmp_path_factory, tiny_model):
    d = tmp_path_factory.mktemp("quality")
    write_yaml(d / "space.yaml", SPACE)
    spec = base_spec(tiny_model, space="space.yaml", workload=WORKLOAD,
                     sampler={"name": "grid"}, quality={},  # the gate, at its defaults
                     budget={"n_trials": 3, "parallel_trials": 2, "trial_timeout_s": 400,
                             "confirm_top_k": 0})
    spec["engine"]["args"]["max-num-seqs"] = 16
    write_yaml(d / "study.yaml", spec)
    proc = run_tuner("run", "study.yaml", cwd=d)
    (d / "run.out").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with Store.open(f"sqlite:///{d}/tuner.db", create=False) as store:
        trials = {(t.params.get("tensor_parallel_size"),
                   t.params.get("speculative_method", "none"),
                   t.params.get("kv_cache_dtype", "auto")): t
                  for t in store.trials("test-study") if t.state != "infeasible"}
        reference = [Answer.from_dict(a) for a in store.reference("test-study").answers]
    return proc.stdout, trials, reference, d


def fp8_kv_cache_runs_on_this_cpu() -> bool:
    """vLLM's own test (cpu_attn.py `_get_attn_isa`): its CPU build keeps an FP8 KV cache only
    on x86 with AVX-512 or AMX; elsewhere (an AVX2 AMD EPYC, say) tuner refuses it before launch."""
    import torch

    return torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported()


def test_tp2_passes_the_default_gate_with_its_near_ties_counted(quality_study):
    _, trials, _, _ = quality_study
    t = trials[(2, "none", "auto")]
    q = t.quality
    assert t.state == "complete" and q.passed, t.failure_reason
    assert q.rule.startswith(f"{RULE_TIES}: ")
    assert q.identical + q.near_ties + q.diverging == q.prompts == 32
    assert q.near_ties > 0  # TP2's other reduction order really flips near-ties here
    assert q.diverging <= QualitySpec().max_diverging * q.prompts
    flip = q.flips["first_near_tie"]
    assert flip["reference_token"] in flip["trial_top"]
    assert flip["trial_token"] in flip["reference_top"]


def test_ngram_speculation_at_the_references_numerics_is_held_to_identical_answers(
        quality_study):
    out, trials, _, _ = quality_study
    q = trials[(1, "ngram", "auto")].quality
    assert q.passed and q.rule.startswith(f"{RULE_EXACT}: ")
    assert q.identical == q.prompts and q.lossless == "speculative_method=ngram"
    assert "quality: matches the reference (32 identical, 0 near-ties, 0 diverging of 32" in out


def test_ngram_acceptance_is_read_from_the_engine_and_the_export_names_the_prompts(
        quality_study):
    """Acceptance counts drafts, from vLLM's own counters, per level; the record says which
    prompts it was measured on (natural text or random tokens, the field's known trap)."""
    out, trials, _, folder = quality_study
    t = trials[(1, "ngram", "auto")]
    assert "drafts accepted" in out
    (level,) = t.measurements
    assert level.spec_drafts and level.spec_draft_tokens  # stored with the trial
    assert 0 < level.spec_accepted_tokens <= level.spec_draft_tokens
    # The fastest trial that passed the gate (TP2 and its second rank run far slower here).
    record = json.loads((folder / "tuner-exports" / "test-study" / "best.json").read_text())
    assert record["trial"] == t.number and record["parameters"]["speculative_method"] == "ngram"
    assert record["workload"]["prompt_source"] == "corpus"
    assert record["measurements"][0]["spec_accepted_tokens"] == level.spec_accepted_tokens


def test_an_fp8_kv_cache_changes_the_answers_and_fails_naming_its_first_divergence(
        quality_study):
    out, trials, _, _ = quality_study
    if not fp8_kv_cache_runs_on_this_cpu():
        # Refused before launch (the adapter knows vLLM's rule): no server start spent on it.
        assert "KV cache fp8_e5m2 only on x86 with AVX-512 or AMX" in out
        assert (1, "none", "fp8_e5m2") not in trials
        return
    fp8 = trials[(1, "none", "fp8_e5m2")]
    assert (fp8.state, fp8.failure_kind) == ("failed", "quality"), fp8.failure_reason
    q = fp8.quality
    assert not q.passed and q.diverging > QualitySpec().max_diverging * q.prompts
    assert "answers diverge" in fp8.failure_reason
    assert "first difference: prompt " in fp8.failure_reason
    assert q.flips["first_divergence"] is not None
    assert fp8.measurements  # measured first, like any trial


def _fault_answers(tiny_model: Path, extra_args: dict, core: int, run_dir: Path,
                   q: QualitySpec) -> list[Answer]:
    """The gate's prompts answered by a TP1 server of the study's fixed args plus
    `extra_args`, held to one core."""
    spec = base_spec(tiny_model)
    settings = EngineSettings(executable=resolve_executable("vllm"), model=str(tiny_model),
                              args={**spec["engine"]["args"], "max-num-seqs": 16, **extra_args},
                              env=spec["engine"]["env"])
    inv = cpu_inventory()
    plan = get_adapter("vllm").launch_plan({}, settings, host="127.0.0.1", port=free_port(),
                                           inventory=inv, devices=[core])
    prompts = quality_prompts(WorkloadSpec(**WORKLOAD), q, tiny_model,
                              read_model_shape(tiny_model).vocab_size)
    server = ServerProcess(plan, run_dir, cpus=(core,))
    server.start()
    try:
        server.wait_ready(300)
        answers, _ = answer_all(plan.base_url, "completions", plan.model, prompts, q, 120)
    finally:
        server.stop()
    return answers


def rope_base(model: Path, theta: float) -> dict:
    config = json.loads((model / "config.json").read_text())
    return {"hf-overrides": {"rope_parameters": {**config["rope_parameters"],
                                                 "rope_theta": theta}}}


def test_another_rope_base_and_a_repetition_penalty_fail_naming_their_first_divergence(
        quality_study, tiny_model, tmp_path):
    _, _, reference, _ = quality_study
    q = QualitySpec()
    faults = {"rope": rope_base(tiny_model, 10000.0),
              "penalty": {"override-generation-config": {"repetition_penalty": 1.2}}}
    with ThreadPoolExecutor(2) as pool:  # a core each
        runs = {name: pool.submit(_fault_answers, tiny_model, extra, core, tmp_path / name, q)
                for core, (name, extra) in enumerate(faults.items())}
        answers = {name: run.result() for name, run in runs.items()}
    for name, got in answers.items():
        c = compare(reference, got, q.near_tie_margin)
        rule = gate_rule(c, None, None)
        missed = shortfalls(c, q, rule)
        assert rule.name == RULE_TIES and c.failed == 0, name
        assert missed and "answers diverge" in missed[0], (name, dataclasses.asdict(c))
        assert c.first_divergence is not None
    # The penalty leaves the model's arithmetic alone: its answers pick tokens the model itself
    # ranks lower, which is what tells it from a near-tie.
    penalty = compare(reference, answers["penalty"], q.near_tie_margin)
    assert penalty.first_divergence.off_greedy is not None
    assert "its decoding changed" in penalty.first_divergence.line()
