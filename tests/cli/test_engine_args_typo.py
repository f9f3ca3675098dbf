"""A typo in engine.args ends `tuner run` before any server starts, in vLLM's own words."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import call_tuner
from tuner.testing.fake_engine import fake_model

REPO = Path(__file__).resolve().parents[2]
VLLM = Path(sys.executable).with_name("vllm")


@pytest.mark.engine
@pytest.mark.skipif(not VLLM.exists(), reason="vLLM's CPU build is not installed (make install)")
def test_a_misspelt_engine_arg_stops_the_run_before_any_server_or_database(tmp_path: Path,
                                                                          monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = yaml.safe_load((REPO / "examples" / "tiny-moe-cpu.yaml").read_text())
    spec["engine"]["args"]["max-modle-len"] = spec["engine"]["args"].pop("max-model-len")
    spec["engine"]["executable"] = str(VLLM)
    spec["model"] = {"path": str(fake_model(tmp_path / "model"))}  # no server reads it
    spec["workload"]["prompt_source"] = "synthetic"
    spec["runs_dir"] = str(tmp_path / "runs")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(spec))

    outcome = call_tuner("run", "study.yaml", "--storage", f"sqlite:///{tmp_path / 't.db'}",
                         cwd=tmp_path)

    assert outcome.code == 2
    assert ("engine.args: vllm's own parser rejects the command a trial would start "
            "(unrecognized arguments: --max-modle-len 512)") in outcome.stderr + outcome.stdout
    assert not (tmp_path / "t.db").exists()
    assert not (tmp_path / "runs").exists()
