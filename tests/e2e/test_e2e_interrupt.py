"""`kill -9` of `tuner run` in the middle of a real trial, then the next run of the same study."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import optuna
import pytest

from tests.conftest import base_spec, run_tuner, wait_for, write_yaml
from tuner.serve.launcher import group_members
from tuner.store import Store, StoreError

pytestmark = [
    pytest.mark.engine,
    pytest.mark.usefixtures("vllm_installed"),
]

SPACE = {"name": "tp1", "engine": "vllm",
         "parameters": {"max_batch_size": {"values": [4, 16]}}}


def test_sigkilled_tuner_leaves_no_server_and_the_study_resumes(tmp_path, tiny_model):
    write_yaml(tmp_path / "space.yaml", SPACE)
    write_yaml(tmp_path / "study.yaml", base_spec(tiny_model, space="space.yaml",
                                                  budget={"n_trials": 1, "confirm_top_k": 0}))
    url = f"sqlite:///{tmp_path}/tuner.db"
    first = subprocess.Popen([sys.executable, "-m", "tuner.cli", "run", "study.yaml"],
                             cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def server_ready():
            try:  # the file exists a moment before its tables do
                with Store.open(url, create=False) as store:
                    servers = store.unstopped_servers(os.uname().nodename)
            except StoreError:
                return None
            log = tmp_path / "tuner-runs" / "test-study" / "trial-0000" / "server.log"
            if servers and log.exists() and "startup complete" in log.read_text():
                return servers[0]
            return None

        server = wait_for(server_ready, 240, "the first trial's server to be ready")
        time.sleep(2)  # into the measurement
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()

    second = run_tuner("run", "study.yaml", cwd=tmp_path)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "trial 0 was interrupted" in second.stdout

    # No process of the killed run's server survives.
    assert group_members(server.pgid, server.create_time) == []

    trials = Store.open(url, create=False).trials("test-study")
    assert trials[0].number == 0
    assert (trials[0].state, trials[0].failure_kind) == ("failed", "interrupted")
    assert [t.state for t in trials[1:]] == ["complete"]  # the budget of 1 is met by a new trial
    study = optuna.load_study(study_name="test-study", storage=url)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    assert all(t.state != optuna.trial.TrialState.RUNNING for t in study.trials)


def test_two_trials_run_at_once_on_disjoint_devices(real_study):
    """budget.parallel_trials: on a 2-core node, two TP1 trials each get a core of their own
    (on an 8-GPU node, two TP4 trials each get four GPUs), and a TP2 trial both. The study of
    conftest's `real_study`: three trials, two at a time where they fit."""
    url = f"sqlite:///{real_study.folder}/tuner.db"
    trials = Store.open(url, create=False).trials(real_study.name)
    tp1 = [t for t in trials if t.params["tensor_parallel_size"] == 1]
    assert [t.state for t in tp1] == ["complete"] * 2
    bind = {t.number: t.launch_plan["env"]["VLLM_CPU_OMP_THREADS_BIND"] for t in trials}
    assert sorted(bind[t.number] for t in tp1) == ["0", "1"]  # each TP1 server on one core
    a, b = tp1
    assert a.started_at < b.finished_at and b.started_at < a.finished_at  # at the same time
    for a in trials:  # and no two trials that ran at the same time shared a core
        for b in trials:
            if a.number < b.number and a.started_at < b.finished_at \
                    and b.started_at < a.finished_at:
                # "0", "1", or "0|1" (a core per rank) on this 2-core node
                assert not set(re.findall(r"\d+", bind[a.number])) \
                    & set(re.findall(r"\d+", bind[b.number])), (a.number, b.number)
