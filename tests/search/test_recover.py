"""After a tuner dies mid-trial, the next run on that host cleans up what it left."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager
from types import SimpleNamespace

import optuna
import psutil
import pytest
from optuna.trial import TrialState

from tuner.search.bridge import optuna_storage
from tuner.search.recovery import recover, worker_id
from tuner.store import Store


@pytest.fixture
def setup(tmp_path):
    url = f"sqlite:///{tmp_path}/tuner.db"
    store = Store.open(url)
    store.ensure_study("s", engine="vllm", model="m", gpu_type="cpu", spec={}, space={},
                       tuner_version="test")
    study = optuna.create_study(study_name="s", storage=optuna_storage(url),
                                direction="maximize")
    host = socket.gethostname()
    said: list[str] = []
    ctx = SimpleNamespace(store=store, name="s", inventory=SimpleNamespace(host=host),
                          say=said.append)
    return ctx, study, host, said


@contextmanager
def _server(ctx, tid, host, owner_pid, owner_create_time):
    """A stand-in engine server of trial `tid` (a sleeping process in a session of its own),
    recorded with its owner; killed at the end if recovery left it running."""
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)
    try:
        ctx.store.record_server(tid, host=host, pid=server.pid, pgid=server.pid,
                                create_time=psutil.Process(server.pid).create_time(),
                                log_path="/nonexistent/server.log", owner_pid=owner_pid,
                                owner_create_time=owner_create_time)
        yield server
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 9)
            server.wait()


def _running_trial(ctx, study, host, worker):
    trial = study.ask({"max_batch_size": optuna.distributions.CategoricalDistribution([4, 16])})
    trial.set_user_attr("worker_host", host)
    trial.set_user_attr("worker", worker)
    tid = ctx.store.start_trial("s", trial.number, trial.params, worker_host=host,
                                worker_pid=0)
    return trial, tid


def test_a_dead_workers_server_is_reaped_and_its_trial_failed(setup):
    ctx, study, host, said = setup
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dead_worker = f"{dead.pid}:{psutil.Process().create_time() - 5:.3f}"
    trial, tid = _running_trial(ctx, study, host, dead_worker)
    with _server(ctx, tid, host, dead.pid, psutil.Process().create_time() - 5) as leftover:
        live_trial, live_tid = _running_trial(ctx, study, host, worker_id())
        recover(ctx, study)
        assert leftover.wait(timeout=30) is not None  # the leftover server is gone

    assert ctx.store.unstopped_servers(host) == []
    failed = ctx.store.trial("s", trial.number)
    assert (failed.state, failed.failure_kind) == ("failed", "interrupted")
    by_number = {t.number: t for t in study.get_trials()}
    assert by_number[trial.number].state == TrialState.FAIL
    # A trial whose tuner is alive (another worker, here this very process) is left running.
    assert by_number[live_trial.number].state == TrialState.RUNNING
    assert ctx.store.trial("s", live_trial.number).state == "running"
    assert any("interrupted" in line for line in said)


def test_a_live_workers_server_on_the_same_host_is_left_alone(setup):
    """Two workers on one node: the second one's start does not stop the first one's server."""
    ctx, study, host, said = setup
    trial = study.ask({"max_batch_size": optuna.distributions.CategoricalDistribution([4, 16])})
    trial.set_user_attr("worker_host", host)
    trial.set_user_attr("worker", worker_id())
    tid = ctx.store.start_trial("s", trial.number, trial.params, worker_host=host,
                                worker_pid=os.getpid())  # this process launched the server
    with _server(ctx, tid, host, os.getpid(), psutil.Process().create_time()) as server:
        recover(ctx, study)
        assert server.poll() is None  # still running
        assert [s.trial_id for s in ctx.store.unstopped_servers(host)] == [tid]
        assert ctx.store.trial("s", trial.number).state == "running"


def test_a_confirmations_server_is_judged_by_its_own_owner_not_the_trials_worker(setup):
    """`tuner confirm` re-runs a trial whose worker is long gone: the server row names the
    confirming process, so another tuner starting on the host leaves the server running."""
    ctx, study, host, said = setup
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    tid = ctx.store.start_trial("s", 7, {"max_batch_size": 4}, worker_host=host,
                                worker_pid=gone.pid)  # the original trial's worker: exited
    with _server(ctx, tid, host, os.getpid(), psutil.Process().create_time()) as server:
        (row,) = ctx.store.unstopped_servers(host)
        assert (row.owner_pid, row.owner_create_time) == (os.getpid(),
                                                          psutil.Process().create_time())
        recover(ctx, study)
        assert server.poll() is None  # still measuring
        assert [s.trial_id for s in ctx.store.unstopped_servers(host)] == [tid]


def test_a_server_whose_owners_pid_was_reused_is_reaped(setup):
    """The owner's pid is alive but is another process now (a different start time)."""
    ctx, study, host, said = setup
    tid = ctx.store.start_trial("s", 8, {"max_batch_size": 16}, worker_host=host,
                                worker_pid=os.getpid())
    with _server(ctx, tid, host, os.getpid(), psutil.Process().create_time() - 3600) as server:
        recover(ctx, study)
        assert server.wait(timeout=30) is not None
        assert ctx.store.unstopped_servers(host) == []


def test_a_trial_another_worker_is_still_starting_is_left_alone(setup):
    """Its worker has recorded its host but not yet itself: not a dead worker's trial."""
    ctx, study, host, said = setup
    trial = study.ask({"max_batch_size": optuna.distributions.CategoricalDistribution([4, 16])})
    trial.set_user_attr("worker_host", host)
    recover(ctx, study)
    assert study.get_trials()[trial.number].state == TrialState.RUNNING
    assert said == []
