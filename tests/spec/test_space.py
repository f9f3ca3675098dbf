"""Search spaces: declared domains, conditional parameters, enumeration and feasibility."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests.conftest import write_yaml
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.spec.errors import BadInput
from tuner.spec.feasibility import infeasibility
from tuner.spec.gpu_types import CPU, gpu_type
from tuner.spec.model_shape import ModelShape
from tuner.spec.space import SearchSpace, load_space, load_space_file
from tuner.spec.study_spec import search_spaces_dir

TINY = ModelShape(num_attention_heads=4, num_key_value_heads=2, num_experts=8, vocab_size=512)
DENSE = ModelShape(num_attention_heads=6, num_key_value_heads=6, num_experts=0, vocab_size=512)


VLLM = get_adapter("vllm")
SETTINGS = EngineSettings(executable="vllm", model="m", args={}, env={})


def infeasible(config, shape=None, devices=2, gpu=CPU, settings=SETTINGS):
    return infeasibility(config, shape=shape or TINY, devices=devices, adapter=VLLM, gpu=gpu,
                         settings=settings)


def space(**params) -> SearchSpace:
    return SearchSpace.model_validate({"name": "s", "engine": "vllm", "parameters": params})


def test_the_shipped_cpu_space_loads_and_has_the_cpu_knobs():
    s = load_space(search_spaces_dir() / "tiny-moe-cpu.yaml")
    assert set(s.parameters) == {
        "tensor_parallel_size", "data_parallel_size", "enable_expert_parallel", "max_batch_size",
        "max_num_tokens", "speculative_method", "num_speculative_tokens"}
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
        params = s.sample(trial.suggest_categorical)
        assert ("num_speculative_tokens" in params) == (params["speculative_method"] == "ngram")
        assert trial.params == params  # Optuna records exactly the active parameters
        study.tell(trial, 1.0)


@pytest.mark.parametrize("params, message", [
    ({"max_batch_size": {"values": []}}, "empty domain"),
    ({"max_batch_size": {"values": [4, 4]}}, "distinct"),
    ({"batch": {"values": [4]}}, "unknown parameter 'batch'"),
    ({"num_speculative_tokens": {"values": [2], "when": {"speculative_method": "ngram"}}},
     "not declared before it"),
    ({"max_batch_size": {"values": [4], "step": 2}}, "Extra inputs"),
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
    assert reason in infeasible(config, shape, devices)


@pytest.mark.parametrize("config", [
    {"tensor_parallel_size": 2, "enable_expert_parallel": True},
    {"tensor_parallel_size": 1, "data_parallel_size": 2},
    {"tensor_parallel_size": 1, "max_batch_size": 64},
])
def test_feasible_configurations_pass(config):
    assert infeasible(config) is None


def test_the_cpu_space_on_two_cores_keeps_the_configurations_that_really_fail():
    """TP2+EP and DP2 are feasible on paper; they fail in vLLM's CPU build, for real."""
    s = load_space(search_spaces_dir() / "tiny-moe-cpu.yaml")
    feasible = [c for c in s.enumerate() if infeasible(c) is None]
    assert any(c["tensor_parallel_size"] == 2 and c["enable_expert_parallel"] for c in feasible)
    assert any(c["data_parallel_size"] == 2 for c in feasible)
    assert not any(c["tensor_parallel_size"] * c["data_parallel_size"] > 2 for c in feasible)


def test_domains_can_differ_by_gpu_type_and_architecture(tmp_path: Path):
    import yaml

    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "engines": {"vllm": {"parameters": {
        "tensor_parallel_size": {"values": [1, 2]},
        "moe_backend": {"values": {"hopper": ["triton", "marlin"],
                                   "blackwell": ["flashinfer_trtllm", "triton"],
                                   "H100-SXM": ["triton"]}},
        "max_batch_size": {"values": [64], "when": {"moe_backend": "triton"}},
    }}}}, sort_keys=False))
    f = load_space_file(path)
    assert f.resolve("vllm", gpu_type("H200")).values("moe_backend") == ["triton", "marlin"]
    assert f.resolve("vllm", gpu_type("B200")).values("moe_backend") == [
        "flashinfer_trtllm", "triton"]
    assert f.resolve("vllm", gpu_type("H100-SXM")).values("moe_backend") == ["triton"]
    on_cpu = f.resolve("vllm", CPU)  # no MoE kernel choice on CPU, nor what depends on it
    assert set(on_cpu.parameters) == {"tensor_parallel_size"}
    with pytest.raises(BadInput, match="no parameters for engine trtllm"):
        f.resolve("trtllm", CPU)


def test_engine_rules_refuse_what_the_engine_refuses():
    h200, b200 = gpu_type("H200"), gpu_type("B200")
    assert "runs on blackwell, not hopper" in infeasible(
        {"moe_backend": "flashinfer_trtllm"}, devices=8, gpu=h200)
    assert infeasible({"moe_backend": "flashinfer_trtllm"}, devices=8, gpu=b200) is None
    assert "draft model" in infeasible({"speculative_method": "eagle3",
                                        "num_speculative_tokens": 3}, devices=8, gpu=h200)
    with_draft = EngineSettings(executable="vllm", model="m", args={}, env={},
                                draft_model="nvidia/gpt-oss-120b-Eagle3-v3")
    assert infeasible({"speculative_method": "eagle3"}, devices=8, gpu=h200,
                      settings=with_draft) is None


@pytest.mark.parametrize("params, message", [
    ({"max_batch_size": {"values": [16, "64"]}},
     "max_batch_size value '64' is not one of its values, which are positive integers "
     "(e.g. 16): write 64"),
    ({"tensor_parallel_size": {"values": [0, 1]}}, "tensor_parallel_size value 0"),
    ({"max_num_tokens": {"values": [True]}}, "max_num_tokens value True"),
    ({"enable_expert_parallel": {"values": ["yes"]}}, "which are true or false"),
    ({"gpu_memory_fraction": {"values": [0.9, 1.5]}}, "which are fractions in (0, 1]"),
    ({"kv_cache_dtype": {"values": [8]}}, "kv_cache_dtype value 8"),
    ({"max_batch_size": {"values": {"H200": [16, "x"]}}}, "max_batch_size value 'x'"),
    ({"speculative_method": {"values": ["none", "ngram"]},
      "num_speculative_tokens": {"values": [2], "when": {"speculative_method": 3}}},
     "num_speculative_tokens.when: speculative_method value 3"),
])
def test_every_value_has_its_parameters_kind(tmp_path, params, message):
    """A string where a size belongs is found when the space is read, never by an engine's int()
    at launch."""
    path = write_yaml(tmp_path / "space.yaml", {"name": "s", "engine": "vllm",
                                                "parameters": params})
    with pytest.raises(BadInput) as e:
        load_space(path)
    assert message in str(e.value)


def test_the_shipped_spaces_hold_values_of_their_parameters_kinds():
    for path in sorted(search_spaces_dir().glob("*.yaml")):
        load_space_file(path)  # raises BadInput on any value of the wrong kind
