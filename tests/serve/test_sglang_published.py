"""SGLang's own gpt-oss-120b launch commands (tests/serve/data/sglang-gpt-oss-benchmark.yaml, from
its benchmark/gpt_oss README) are trial configurations: tuner's argv for them carries the same
flags and values. Named differences: the README abbreviates `--tp-size` as `--tp` and
`--speculative-algorithm` as `--speculative-algo` (argparse takes a unique prefix; checked
against 0.5.23's flag list), and writes `--model`, the alias of `--model-path`."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from tests.conftest import REPO
from tuner.serve.engines import EngineSettings, get_adapter
from tuner.serve.hardware import planned_inventory
from tuner.spec.gpu_types import gpu_type
from tuner.spec.model_shape import shape_by_name

PUBLISHED = yaml.safe_load(
    (REPO / "tests" / "serve" / "data" / "sglang-gpt-oss-benchmark.yaml").read_text())
FLAGS = set(json.loads((REPO / "tuner" / "serve" / "engines" / "data" /
                        "sglang-0.5.23-server_args.json").read_text())["flags"])
ALIASES = {"--model": "--model-path"}


def flag_values(argv: list[str]) -> dict[str, str]:
    """`--flag value` pairs, abbreviations resolved as argparse does (a unique prefix)."""
    out, i = {}, 0
    while i < len(argv):
        flag = ALIASES.get(argv[i], argv[i])
        if flag not in FLAGS:
            (flag,) = [f for f in FLAGS if f.startswith(flag)]  # unique, or the test fails
        out[flag] = argv[i + 1]
        i += 2
    return out


def trial_config(published: dict[str, str]) -> tuple[dict, str | None]:
    config = {"tensor_parallel_size": int(published["--tp-size"])}
    if published.get("--speculative-algorithm") == "EAGLE3":
        config |= {"speculative_method": "eagle3",
                   "num_speculative_tokens": int(published["--speculative-num-steps"])}
    return config, published.get("--speculative-draft-model-path")


@pytest.mark.parametrize("entry", PUBLISHED["commands"], ids=lambda e: f"{e['gpu']}-{e['section']}")
def test_sglangs_published_command_is_a_trial_config(entry):
    argv = shlex.split(entry["command"])
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    published = flag_values(argv[3:])
    config, draft = trial_config(published)
    settings = EngineSettings(executable="python3", model=published["--model-path"], args={},
                              env={}, draft_model=draft)
    adapter = get_adapter("sglang")
    gpu = gpu_type(entry["gpu"])
    assert adapter.infeasibility(config, shape_by_name("gpt-oss-120b"), gpu, settings) is None
    plan = adapter.launch_plan(config, settings, host="0.0.0.0", port=30000,
                               inventory=planned_inventory(gpu, 8), devices=list(range(8)))
    ours = flag_values(plan.argv[3:])
    assert (ours.pop("--host"), ours.pop("--port")) == ("0.0.0.0", "30000")
    assert ours == published


def test_the_copy_names_its_source_commit():
    repo, path, commit = PUBLISHED["source"]
    assert (repo, path, len(commit)) == ("sgl-project/sglang", "benchmark/gpt_oss/README.md", 40)
