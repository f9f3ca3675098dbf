"""A trial's `vllm serve` command is read by vLLM's own parser before any server starts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tuner.serve.engines.base import LaunchPlan
from tuner.serve.engines.vllm_parser import interpreter_of, rejection

VLLM = Path(sys.executable).with_name("vllm")


@pytest.mark.parametrize("first_line, python", [
    ("#!/opt/venv/bin/python3.11", "/opt/venv/bin/python3.11"),
    ("#!/usr/bin/env python3", "python3"),
    ("#!/bin/sh", None),
    ("exec something", None),
])
def test_the_engine_s_python_is_read_from_its_executable_s_first_line(tmp_path: Path,
                                                                      first_line, python):
    exe = tmp_path / "vllm"
    exe.write_text(first_line + "\nimport sys\n")
    assert interpreter_of(str(exe)) == python


def test_an_executable_that_is_not_a_python_script_is_not_checked(tmp_path: Path):
    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\nexit 1\n")
    plan = LaunchPlan(engine="vllm", argv=[str(exe), "serve", "m", "--max-modle-len", "5"],
                      env={}, files={}, host="127.0.0.1", port=8000, model="m", gpus=1)
    assert rejection(plan, say=print) is None
    assert interpreter_of(str(tmp_path / "missing")) is None


def plan_with(config: str, model: str = "/models/tiny") -> LaunchPlan:
    return LaunchPlan(engine="vllm", argv=[str(VLLM), "serve", model, "--config", "config.yaml",
                                           "--host", "127.0.0.1", "--port", "8000"],
                      env={}, files={"config.yaml": config}, host="127.0.0.1", port=8000,
                      model=model, gpus=1)


@pytest.mark.engine
@pytest.mark.skipif(not VLLM.exists(), reason="vLLM's CPU build is not installed (make install)")
def test_vllm_s_parser_names_a_typo_and_remembers_a_command_it_accepted(tmp_path: Path,
                                                                       monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    said: list[str] = []

    assert rejection(plan_with("max-modle-len: 512\n"), said.append) == \
        "unrecognized arguments: --max-modle-len 512"
    assert rejection(plan_with("max-model-len: 512\ndtype: bfloat16\n"), said.append) is None
    assert len(said) == 1 and said[0].startswith("engine command read by vLLM's own parser")
    remembered = json.loads((tmp_path / "cache" / "tuner" / "vllm-commands.json").read_text())
    assert len(remembered) == 1  # the accepted one only

    # Remembered, another model path included: not read again.
    assert rejection(plan_with("max-model-len: 512\ndtype: bfloat16\n", "/other/model"),
                     said.append) is None
    assert len(said) == 1
    shutil.rmtree(tmp_path / "cache")
