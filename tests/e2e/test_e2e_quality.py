"""The quality gate on real vLLM (CPU build) trials of the tiny gpt-oss: an FP8 (e5m2) KV cache
really changes its greedy answers and is recorded as a `quality` failure with its figures, while
n-gram speculation, lossless under greedy decoding, matches the reference exactly. One study of
three trials (two at a time) and one reference server: marked `engine`."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, base_spec, run_tuner, write_yaml
from tuner.store import Store

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]


@pytest.fixture(scope="module")
def quality_study(tmp_path_factory, tiny_model):
    d = tmp_path_factory.mktemp("quality")
    space = (REPO / "search_spaces" / "tiny-moe-quality-cpu.yaml").read_text()
    (d / "space.yaml").write_text(space)
    spec = base_spec(tiny_model, space="space.yaml",
                     workload={"prompt_source": "corpus", "input_len": 32, "output_len": 16,
                               "concurrency": [4], "requests_per_level": 8,
                               "warmup_requests": 1},
                     sampler={"name": "grid"},
                     quality={"prompts": 16, "max_tokens": 24},
                     # After the reference, the trials two at a time, a core each: greedy
                     # answers do not depend on how fast the server runs.
                     budget={"n_trials": 3, "parallel_trials": 2, "trial_timeout_s": 400,
                             "confirm_top_k": 0})
    spec["engine"]["args"]["max-num-seqs"] = 16
    write_yaml(d / "study.yaml", spec)
    proc = run_tuner("run", "study.yaml", cwd=d)
    (d / "run.out").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with Store.open(f"sqlite:///{d}/tuner.db", create=False) as store:
        trials = {(t.params["kv_cache_dtype"], t.params.get("speculative_method")): t
                  for t in store.trials("test-study") if t.state != "infeasible"}
    return proc.stdout, trials


def fp8_kv_cache_runs_on_this_cpu() -> bool:
    """vLLM's own test (cpu_attn.py `_get_attn_isa`): its CPU build keeps an FP8 KV cache only
    on x86 with AVX-512 or AMX; elsewhere (an AVX2 AMD EPYC, say) tuner refuses it before launch."""
    import torch

    return torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported()


def test_an_fp8_kv_cache_changes_the_answers_and_is_a_quality_failure(quality_study):
    out, trials = quality_study
    if not fp8_kv_cache_runs_on_this_cpu():
        # Refused before launch (the adapter knows vLLM's rule): no server start spent on it.
        assert "KV cache fp8_e5m2 only on x86 with AVX-512 or AMX" in out
        assert ("fp8_e5m2", None) not in trials
        return
    fp8 = trials[("fp8_e5m2", None)]
    assert (fp8.state, fp8.failure_kind) == ("failed", "quality"), fp8.failure_reason
    q = fp8.quality
    assert not q.passed and q.exact_match_rate < 0.5
    assert q.mean_logprob_divergence is not None  # vLLM returned the top logprobs
    assert "exact match" in fp8.failure_reason and "first difference: prompt" in fp8.failure_reason
    assert fp8.measurements  # measured first, like any trial


def test_ngram_speculation_and_the_default_kv_cache_match_the_reference_exactly(quality_study):
    out, trials = quality_study
    for key in [("auto", "none"), ("auto", "ngram")]:
        t = trials[key]
        assert t.state == "complete" and t.quality.passed, (key, t.failure_reason)
        assert t.quality.exact_match_rate == 1.0 and t.quality.common_prefix_share == 1.0
    assert trials[("auto", "ngram")].quality.lossless == "speculative_method=ngram"
    assert out.count("quality: matches the reference (exact 100%") == 2
