"""The quality section of a study spec: on by default with small greedy defaults; a bad value is
one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import base_spec, write_yaml
from tuner.spec.errors import BadInput
from tuner.spec.study_spec import load_spec


def load(tmp_path: Path, quality: dict | None):
    spec = base_spec(tmp_path / "model")
    if quality is None:
        del spec["quality"]
    else:
        spec["quality"] = quality
    return load_spec(write_yaml(tmp_path / "study.yaml", spec))


def test_the_gate_is_on_by_default_with_a_few_dozen_short_greedy_answers(tmp_path):
    q = load(tmp_path, None).quality
    assert q.enabled and q.reference is None  # the engine's defaults answer first
    assert (q.prompts, q.max_tokens, q.seed, q.top_logprobs) == (32, 32, 0, 5)
    assert q.concurrency == 1  # each answer decoded alone: no batch (timing) in its numerics
    # The tie-aware rule (bench/quality_near_ties.py): a flip is a near-tie within 0.1 nats on
    # one side; 15% of the answers may diverge; the mean shared-context divergence at most 0.1.
    assert (q.near_tie_margin, q.max_diverging, q.max_logprob_divergence) == (0.1, 0.15, 0.1)
    # Where the engine gives no logprobs: exact match and common prefix.
    assert (q.min_exact_match, q.min_common_prefix) == (0.5, 0.75)
    # Speculative decoding is lossless under greedy decoding: held to every answer.
    assert q.lossless.parameters == ["speculative_method"] and q.lossless.min_exact_match == 1


@pytest.mark.parametrize("quality, message", [
    ({"min_exact_match": 1.5}, "quality.min_exact_match: Input should be less than or equal to 1"),
    ({"prompts": 0}, "quality.prompts: Input should be greater than or equal to 1"),
    ({"max_logprob_divergence": 0}, "quality.max_logprob_divergence: Input should be greater "
                                    "than 0"),
    ({"top_logprobs": 50}, "quality.top_logprobs: Input should be less than or equal to 20"),
    ({"lossless": {"min_exact_match": -1}}, "quality.lossless.min_exact_match"),
    ({"threshold": 0.9}, "quality.threshold"),
])
def test_a_bad_quality_value_is_one_line_naming_the_field(tmp_path, quality, message):
    with pytest.raises(BadInput) as e:
        load(tmp_path, quality)
    assert message in str(e.value) and "\n" not in str(e.value)
