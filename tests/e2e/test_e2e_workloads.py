"""A real study on vLLM's CPU build with the workload a team would trust: chat requests from a
JSONL file of conversations, Poisson arrivals, each level repeated in rounds until its interval
is tight (or the rounds run out), and the engine's own gauges kept per level."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import REPO, base_spec, run_tuner, write_yaml
from tuner.store import Store

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]

SPACE = {"name": "one", "engine": "vllm", "parameters": {"max_batch_size": {"values": [16]}}}


def test_chat_from_a_jsonl_file_at_a_poisson_rate_in_rounds_with_engine_gauges(tmp_path):
    write_yaml(tmp_path / "space.yaml", SPACE)
    shutil.copy(REPO / "examples" / "chat-prompts.jsonl", tmp_path / "prompts.jsonl")
    # tiny Qwen3-MoE: vLLM renders its chat with the tokenizer's template (gpt-oss uses Harmony).
    spec = base_spec(tmp_path / "tiny-qwen3-moe", space="space.yaml", name="chat-poisson",
                     budget={"n_trials": 1, "trial_timeout_s": 240, "confirm_top_k": 0})
    spec["model"]["generate"] = "tiny-qwen3-moe"
    spec["workload"] = {
        "prompt_source": "file", "prompt_file": "prompts.jsonl", "api": "chat",
        "input_len": 96, "output_len": 64, "output_len_from": "dataset",
        "arrival": "poisson", "request_rates": [12], "concurrency": [16],
        "requests_per_level": 12, "warmup_requests": 2, "max_rounds": 3, "ci_target": 0.02,
    }
    write_yaml(tmp_path / "study.yaml", spec)
    proc = run_tuner("run", "study.yaml", cwd=tmp_path, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "12 req/s" in proc.stdout

    (trial,) = Store.open(f"sqlite:///{tmp_path}/tuner.db").trials("chat-poisson")
    assert trial.state == "complete", trial.failure_reason
    (level,) = trial.measurements
    assert (level.request_rate, level.concurrency, level.errors) == (12.0, 16, 0)
    assert 2 <= level.rounds <= 3 and level.requests == 12 * level.rounds
    assert level.output_tok_s_ci95 > 0
    # Converged exactly when the half-width reached 2% of the mean before the third round.
    assert level.converged == (level.output_tok_s_ci95 <= 0.02 * level.output_tok_s)
    assert level.ttft_mean_ms > 0 and level.ttft_mean_ci95_ms > 0
    assert level.itl_mean_ms > 0 and level.itl_mean_ci95_ms > 0
    # Replies set the output lengths (39 to 79 tokens of the tiny tokenizer, capped at 64).
    assert 39 * level.requests < level.output_tokens < 64 * level.requests
    assert level.input_tokens > 15 * level.requests  # the server's count, chat template included
    # The engine's gauges, sampled every 0.5 s while about 3 requests were in flight (12/s of
    # ~0.25 s each): KV use is tiny beside VLLM_CPU_KVCACHE_SPACE's 1 GiB, but not zero.
    assert 0 < level.kv_cache_usage_max <= 1
    assert level.requests_running_max >= 1
    assert level.requests_waiting_max >= 0 and level.preemptions >= 0

    record = json.loads((tmp_path / "tuner-exports" / "chat-poisson" / "best.json").read_text())
    (exported,) = record["measurements"]
    assert (exported["rounds"], exported["converged"]) == (level.rounds, level.converged)
    assert exported["kv_cache_usage_max"] == level.kv_cache_usage_max
    assert record["workload"]["api"] == "chat" and record["workload"]["arrival"] == "poisson"
    print(f"rounds {level.rounds}, tok/s {level.output_tok_s:.0f} ± "
          f"{level.output_tok_s_ci95:.0f}, converged {level.converged}, "
          f"KV max {level.kv_cache_usage_max:.4f}, running max {level.requests_running_max}")
