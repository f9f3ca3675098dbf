"""Spec and space files as bytes: what cannot be read is one line naming the file and the fix,
before anything is validated, stored or serialised."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import base_spec, write_yaml
from tuner.spec.errors import BadInput
from tuner.spec.study_spec import load_spec


def refused(path: Path) -> str:
    with pytest.raises(BadInput) as e:
        load_spec(path)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    assert "study.yaml is not UTF-8 text (byte 9): save it as UTF-8" in refused(path)


def test_aliases_that_expand_without_bound_are_refused(tmp_path):
    lines = ["name: x", "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")  # 10^9 values
    path = tmp_path / "study.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert "expands to more than 10,000 values (YAML aliases" in refused(path)


def test_a_recursive_alias_is_refused(tmp_path):
    spec = base_spec(tmp_path / "model")
    path = write_yaml(tmp_path / "study.yaml", spec)
    path.write_text(path.read_text().replace("engine:\n", "engine:\n  loop: &l [*l]\n", 1))
    assert "expands to more than 10,000 values" in refused(path)


def test_a_small_alias_is_fine(tmp_path):
    spec = base_spec(tmp_path / "model")
    path = write_yaml(tmp_path / "study.yaml", spec)
    text = path.read_text().replace("max-model-len: 256", "max-model-len: &len 256")
    path.write_text(text.replace("input_len: 32", "input_len: *len"))
    assert load_spec(path).workload.input_len == 256


def test_deep_nesting_is_one_line(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("name: " + "[" * 20_000 + "]" * 20_000 + "\n")
    assert "study.yaml" in refused(path)


@pytest.mark.parametrize("value, where", [
    ({"a": {"b": {"c": 1}}}, "engine.args.compilation-config"),
    ([[1, 2]], "engine.args.compilation-config"),
])
def test_engine_args_hold_scalars_and_shallow_lists_or_mappings(tmp_path, value, where):
    spec = base_spec(tmp_path / "model")
    spec["engine"]["args"]["compilation-config"] = value
    assert where in refused(write_yaml(tmp_path / "study.yaml", spec))


def test_engine_args_take_what_engines_nest(tmp_path):
    spec = base_spec(tmp_path / "model")
    spec["engine"]["args"].update({"kv_cache_config": {"free_gpu_memory_fraction": 0.9},
                                   "cuda_graph_config": {"batch_sizes": [1, 2, 4]},
                                   "moe_config": {"backend": "TRTLLM"}, "tags": ["a", "b"]})
    assert load_spec(write_yaml(tmp_path / "study.yaml", spec)).engine.args["tags"] == ["a", "b"]


def test_an_engine_env_value_is_text(tmp_path):
    spec = base_spec(tmp_path / "model")
    spec["engine"]["env"]["OMP_NUM_THREADS"] = {"nested": 1}
    assert "engine.env.OMP_NUM_THREADS" in refused(write_yaml(tmp_path / "study.yaml", spec))
