"""One study measures on a machine's devices at a time, or is told who else does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import base_spec, call_tuner, write_yaml
from tuner.serve.device_locks import LOCK_DIR_ENV, measuring_on
from tuner.testing.fake_engine import fake_engine_section, fake_model


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    (tmp_path / "locks").mkdir()


def test_a_study_on_free_devices_says_nothing_and_meets_no_one():
    said: list[str] = []
    with measuring_on("cpu", [0, 1], "tuner study a", wait=False, say=said.append) as others:
        assert others == []
    assert said == []


def test_a_second_study_on_the_same_cores_is_told_who_measures_there_and_how_to_wait():
    said: list[str] = []
    with measuring_on("cpu", [0, 1], "tuner study a", wait=False, say=print):
        with measuring_on("cpu", [1, 2], "tuner study b", wait=False, say=said.append) as others:
            assert others == [f"tuner study a (pid {os.getpid()})"]
    assert len(said) == 1
    assert said[0].startswith(f"warning: tuner study a (pid {os.getpid()}) is measuring on cpu 1")
    assert "--wait" in said[0]


def test_studies_on_disjoint_devices_or_other_kinds_do_not_meet():
    said: list[str] = []
    with measuring_on("gpu", [0, 1], "tuner study a", wait=False, say=print):
        with measuring_on("gpu", [2, 3], "tuner study b", wait=False, say=said.append):
            pass
        with measuring_on("cpu", [0, 1], "tuner study c", wait=False, say=said.append):
            pass
    assert said == []


def test_with_wait_a_second_study_starts_only_once_the_first_has_released_the_devices():
    waiting, inside = threading.Event(), threading.Event()
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("waiting"):
            waiting.set()

    def second() -> None:
        with measuring_on("cpu", [0], "tuner study b", wait=True, say=say):
            inside.set()

    first = measuring_on("cpu", [0], "tuner study a", wait=False, say=print)
    first.__enter__()
    t = threading.Thread(target=second)
    t.start()
    assert waiting.wait(30)
    assert not inside.is_set()  # still held by the first study
    first.__exit__(None, None, None)
    t.join(30)
    assert inside.is_set()
    assert said[0].startswith(f"waiting: tuner study a (pid {os.getpid()}) is measuring on cpu 0")
    assert said[1] == "the devices are free: starting"


def test_a_study_that_dies_leaves_its_devices_free(tmp_path: Path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom tuner.serve.device_locks import measuring_on\n"
         "with measuring_on('cpu', [0], 'tuner study gone', wait=False, say=print):\n"
         "    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ)
    assert holder.stdout.readline().strip() == "held"
    seen: list[str] = []
    with measuring_on("cpu", [0], "tuner study b", wait=False, say=seen.append):
        pass
    assert "tuner study gone" in seen[0]
    holder.kill()
    holder.wait()
    said: list[str] = []
    with measuring_on("cpu", [0], "tuner study c", wait=False, say=said.append):
        pass
    assert said == []


def test_a_lock_folder_it_cannot_write_costs_the_check_not_the_study(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "no" / "such" / "folder"))
    said: list[str] = []
    with measuring_on("cpu", [0], "tuner study a", wait=False, say=said.append) as others:
        assert others == []
    assert said == []


def test_tuner_run_beside_another_study_on_its_cores_says_so_and_still_runs(tmp_path: Path):
    (tmp_path / "landscape.json").write_text(json.dumps({"default": {}}))
    write_yaml(tmp_path / "space.yaml", {"name": "one", "engine": "vllm", "parameters": {
        "max_batch_size": {"values": [4]}}})
    spec = base_spec(fake_model(tmp_path / "model"), space="space.yaml",
                     hardware={"gpu_type": "cpu", "devices": 1},
                     budget={"n_trials": 1, "trial_timeout_s": 120, "confirm_top_k": 0})
    spec["engine"] = fake_engine_section(tmp_path, ready_timeout_s=120)
    write_yaml(tmp_path / "study.yaml", spec)

    with measuring_on("cpu", [0], "tuner study other", wait=False, say=print):
        outcome = call_tuner("run", "study.yaml", cwd=tmp_path)

    assert outcome.code == 0, outcome.stdout + outcome.stderr
    assert f"warning: tuner study other (pid {os.getpid()}) is measuring on cpu 0" in outcome.stdout
