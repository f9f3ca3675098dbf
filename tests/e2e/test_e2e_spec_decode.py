"""Speculative decoding measured honestly: the acceptance the engine reports depends on the
prompts, and random-token prompts (the field's known trap) are not natural text."""

from __future__ import annotations

import json

import pytest

from tests.conftest import base_spec, run_tuner, write_yaml
from tuner.store import Store

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]

SPACE = {"name": "ngram", "engine": "vllm", "parameters": {
    "max_batch_size": {"values": [16]},
    "speculative_method": {"values": ["ngram"]},
    "num_speculative_tokens": {"values": [3], "when": {"speculative_method": "ngram"}}}}


def test_ngram_acceptance_from_metrics_differs_between_corpus_and_random_prompts(
        tmp_path, tiny_model):
    write_yaml(tmp_path / "space.yaml", SPACE)
    acceptance = {}
    for source in ("synthetic", "corpus"):
        spec = base_spec(tiny_model, space="space.yaml", name=f"ngram-{source}",
                         budget={"n_trials": 1})
        spec["workload"]["prompt_source"] = source
        spec["workload"]["concurrency"] = [4]
        write_yaml(tmp_path / f"{source}.yaml", spec)
        proc = run_tuner("run", f"{source}.yaml", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "drafts accepted" in proc.stdout
        (trial,) = Store.open(f"sqlite:///{tmp_path}/tuner.db").trials(f"ngram-{source}")
        (level,) = trial.measurements
        assert level.spec_drafts and level.spec_draft_tokens  # stored with the trial
        assert 0 <= level.spec_accepted_tokens <= level.spec_draft_tokens
        acceptance[source] = level.acceptance_rate
        record = json.loads((tmp_path / "tuner-exports" / f"ngram-{source}" / "best.json")
                            .read_text())
        assert record["workload"]["prompt_source"] == source  # which prompts it was measured on
        assert record["measurements"][0]["spec_accepted_tokens"] == level.spec_accepted_tokens
    # Natural text repeats its phrases; random tokens do not, so n-gram drafts rarely match.
    assert acceptance["corpus"] > acceptance["synthetic"]
    print(f"n-gram acceptance: corpus {acceptance['corpus']:.1%}, "
          f"random tokens {acceptance['synthetic']:.1%}")
