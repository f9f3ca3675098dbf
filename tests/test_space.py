"""Search spaces: declared domains, conditional parameters, enumeration and feasibility."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tuner.errors import BadInput
from tuner.space import ModelShape, SearchSpace, infeasibility, load_space
from tuner.spec import search_spaces_dir

TINY = ModelShape(num_attention_heads=4, num_key_value_heads=2, num_experts=8, vocab_size=512)
DENSE = ModelShape(num_attention_heads=6, num_key_value_heads=6, num_experts=0, vocab_size=512)


def space(**params) -> SearchSpace:
    return SearchSpace.model_validate({"name": "s", "engine": "vllm", "parameters": params})


def test_the_shipped_cpu_space_loads_and_has_the_cpu_knobs():
    s = load_space(search_spaces_dir() / "tiny-moe-cpu.yaml")
    assert set(s.parameters) == {
        "tensor_parallel_size", "data_parallel_size", "enable_expert_parallel", "max_num_seqs",
        "max_num_batched_tokens", "speculative_method", "num_speculative_tokens"}
    assert s.parameters["tensor_parallel_size"].values == [1, 2]
    assert s.parameters["data_parallel_size"].values == [1, 2]


def test_a_draft_length_exists_only_with_speculation():
    s = space(speculative_method={"values": ["none", "ngram"]},
              num_speculative_tokens={"values": [2, 4], "when": {"speculative_method": "ngram"}})
    configs = s.enumerate()
    assert {"speculative_method": "none"} in configs
    assert all(("num_speculative_tokens" in c) == (c["speculative_method"] == "ngram")
               for c in configs)
    assert s.size() == 3

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(30):
        trial = study.ask()
        params = s.sample(trial)
        assert ("num_speculative_tokens" in params) == (params["speculative_method"] == "ngram")
        assert trial.params == params  # Optuna records exactly the active parameters
        study.tell(trial, 1.0)


@pytest.mark.parametrize("params, message", [
    ({"max_num_seqs": {"values": []}}, "empty domain"),
    ({"max_num_seqs": {"values": [4, 4]}}, "distinct"),
    ({"batch": {"values": [4]}}, "unknown parameter 'batch'"),
    ({"num_speculative_tokens": {"values": [2], "when": {"speculative_method": "ngram"}}},
     "not declared before it"),
    ({"max_num_seqs": {"values": [4], "step": 2}}, "Extra inputs"),
])
def test_a_bad_space_is_refused_naming_the_parameter(tmp_path: Path, params, message):
    import yaml

    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "engine": "vllm", "parameters": params}))
    with pytest.raises(BadInput) as e:
        load_space(path)
    text = str(e.value)
    assert str(path) in text and "parameters" in text
    assert message in text or (message == "Extra inputs" and "unknown field" in text)
    assert "\n" not in text


@pytest.mark.parametrize("config, devices, shape, reason", [
    ({"tensor_parallel_size": 2, "data_parallel_size": 2}, 2, TINY, "needs 4 devices"),
    ({"tensor_parallel_size": 4}, 4, DENSE, "does not divide the 6 attention heads"),
    ({"tensor_parallel_size": 2, "enable_expert_parallel": True}, 2, DENSE,
     "Mixture-of-Experts"),
    ({"tensor_parallel_size": 1, "enable_expert_parallel": True}, 2, TINY, "single rank"),
])
def test_infeasible_configurations_say_why(config, devices, shape, reason):
    assert reason in infeasibility(config, shape, devices)


@pytest.mark.parametrize("config", [
    {"tensor_parallel_size": 2, "enable_expert_parallel": True},
    {"tensor_parallel_size": 1, "data_parallel_size": 2},
    {"tensor_parallel_size": 1, "max_num_seqs": 64},
])
def test_feasible_configurations_pass(config):
    assert infeasibility(config, TINY, 2) is None


def test_the_cpu_space_on_two_cores_keeps_the_configurations_that_really_fail():
    """TP2+EP and DP2 are feasible on paper; they fail in vLLM's CPU build, for real."""
    s = load_space(search_spaces_dir() / "tiny-moe-cpu.yaml")
    feasible = [c for c in s.enumerate() if infeasibility(c, TINY, 2) is None]
    assert any(c["tensor_parallel_size"] == 2 and c["enable_expert_parallel"] for c in feasible)
    assert any(c["data_parallel_size"] == 2 for c in feasible)
    assert not any(c["tensor_parallel_size"] * c["data_parallel_size"] > 2 for c in feasible)
