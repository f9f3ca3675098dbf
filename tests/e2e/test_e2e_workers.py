"""Several `tuner worker` processes on one PostgreSQL-backed study, each a real process that
starts its trials' servers, claims, beats its heart and dies as a deployed worker does.

Each worker owns one core of this 2-core node (`--devices`), as each worker of a GPU fleet owns
its node's GPUs, so two servers run at once. The servers are the fake engine (tuner.testing):
what is under test is how the workers share, recover and keep secrets, and a real vLLM adds
nothing to that but three server starts. That a SIGKILL leaves none of a real vLLM server's
processes is test_e2e_interrupt.py's; the last test here reads conftest's real study.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from sqlalchemy import create_engine, text

from tests.conftest import TUNER, base_spec, fresh_pg_database, run_tuner, wait_for, write_yaml
from tuner.serve.launcher import group_members
from tuner.store import ServerRecord, Store, TrialRecord
from tuner.testing.fake_engine import fake_engine_section, fake_model
from tuner.verdict.rules import config_key

# Four TP1 configurations: more than the budget, so no worker runs out of work early.
SPACE = {"name": "tp1", "engine": "vllm",
         "parameters": {"max_batch_size": {"values": [4, 8, 16, 32]}}}
# Each worker's first trial, then the killed one's retry: three servers.
BUDGET = 2
LEVELS = [2]
# 10 + 15 x 20 ms a request, two at a time: 96 requests measure for about 15 s, so the kill
# lands mid-sweep.
LANDSCAPE = {"default": {"ttft_s": 0.01, "itl_s": 0.02}}


def _spec(folder: Path, n_trials: int = BUDGET, requests: int = 8) -> dict:
    spec = base_spec(
        fake_model(folder / "model"), space="space.yaml",
        hardware={"gpu_type": "cpu", "devices": 1},
        workload={"input_len": 32, "output_len": 16, "concurrency": LEVELS,
                  "requests_per_level": requests, "warmup_requests": 1},
        budget={"n_trials": n_trials, "trial_timeout_s": 300, "heartbeat_interval_s": 1,
                "heartbeat_grace_s": 6, "confirm_top_k": 0},
    )
    spec["engine"] = fake_engine_section(folder, ready_timeout_s=60)
    return spec


def _create(tmp_path: Path, url: str, **spec) -> str:
    """`tuner run --create-only` of the study; what it printed."""
    (tmp_path / "landscape.json").write_text(json.dumps(LANDSCAPE))
    write_yaml(tmp_path / "space.yaml", SPACE)
    write_yaml(tmp_path / "study.yaml", _spec(tmp_path, **spec))
    proc = run_tuner("run", "study.yaml", "--create-only", "--storage", url, cwd=tmp_path,
                     timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout + proc.stderr


def _worker(tmp_path: Path, url: str, core: int, name: str) -> subprocess.Popen:
    """`tuner worker` on one core, the storage URL in its environment (as a k8s Secret gives
    it); output to a file."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TUNER_STORAGE": url}
    with open(tmp_path / f"{name}.out", "w") as out:
        return subprocess.Popen([*TUNER, "worker", "--study", "test-study", "--devices",
                                 str(core)], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen, tmp_path: Path, name: str, timeout: float) -> str:
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = (tmp_path / f"{name}.out").read_text()
    assert proc.returncode == 0, output[-3000:]
    return output


def _measurement_rows(url: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return c.execute(text("SELECT trial_id, run, level FROM tuner_measurements")).all()
    finally:
        engine.dispose()


def _check_budget_spent_exactly(store: Store, study: optuna.Study) -> None:
    trials = store.trials("test-study")
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))  # every trial number appears once
    assert set(numbers) <= {t.number for t in study.trials}
    counted = [t for t in trials if t.state == "complete"
               or (t.state == "failed" and t.failure_kind != "interrupted")]
    assert len(counted) == BUDGET  # the total equals the budget, across both workers
    assert not [t for t in trials if t.state == "running"]
    assert not [t for t in study.trials if t.state == TrialState.RUNNING]
    for t in trials:
        if t.state == "complete":  # its measurements, one per level, once
            assert [m.concurrency for m in t.measurements] == LEVELS
            assert t.objective is not None and t.objective > 0
    assert store.budget_used("test-study") == BUDGET


@dataclass
class WorkersRun:
    """A PostgreSQL study that two `tuner worker` processes ran at once, each on its own core,
    until one of them (the victim) was killed with SIGKILL in the middle of its trial's sweep;
    the survivor then ran its retry, the rest of the budget. One study (three servers) for three
    tests: how the workers shared it, how the killed trial was recovered, what they printed."""

    folder: Path
    url: str
    survivor: int  # the workers' pids
    victim: int
    killed: TrialRecord  # the victim's trial, as it was while it measured
    server: ServerRecord  # and its server
    outputs: list[str]  # `tuner run --create-only`'s, the survivor's, the victim's


@pytest.fixture(scope="module")
def workers_run(tmp_path_factory) -> WorkersRun:
    with fresh_pg_database() as url:
        d = tmp_path_factory.mktemp("workers")
        # Enough requests that a trial measures for several seconds: the kill lands mid-sweep.
        created = _create(d, url, requests=96)
        # The victim first, and the survivor once the victim's trial is claimed: else, on a busy
        # machine, the survivor could finish its first trial before the victim claims one, run a
        # second and so meet the budget without the killed trial's retry (rightly, but then
        # there is no retry for these tests to check).
        victim = _worker(d, url, 1, "victim")
        store = Store.open(url, create=False)
        try:
            wait_for(lambda: [t for t in store.running_trials("test-study")
                              if t.worker_pid == victim.pid], 300, "the victim's trial")
            survivor = _worker(d, url, 0, "survivor")

            def victim_measuring():
                if "server ready" not in (d / "victim.out").read_text():
                    return None  # the worker prints it, then sweeps
                running = store.running_trials("test-study")
                if not [t for t in running if t.worker_pid == survivor.pid]:
                    return None  # both at work at once before the kill
                (trial,) = [t for t in running if t.worker_pid == victim.pid]
                (server,) = [s for s in store.unstopped_servers(os.uname().nodename)
                             if s.trial_id == trial.id]
                return trial, server

            killed, server = wait_for(victim_measuring, 400, "the victim's server to measure")
            time.sleep(1.5)
            assert group_members(server.pgid, server.create_time)  # its server is up
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
        finally:
            if victim.poll() is None:
                victim.kill()
                victim.wait()
            store.close()
        output = _finish(survivor, d, "survivor", 900)
        yield WorkersRun(d, url, survivor.pid, victim.pid, killed, server,
                         [created, output, (d / "victim.out").read_text()])


def test_two_workers_run_one_study_at_the_same_time(workers_run):
    pg_url, survivor, victim = workers_run.url, workers_run.survivor, workers_run.victim
    store = Store.open(pg_url, create=False)
    study = optuna.load_study(study_name="test-study", storage=pg_url)
    _check_budget_spent_exactly(store, study)
    trials = [t for t in store.trials("test-study") if t.state != "infeasible"]
    complete = [t for t in trials if t.state == "complete"]
    assert len(complete) == BUDGET, [(t.state, t.failure_reason) for t in trials]
    # Never the same configuration twice (distinct sampler seeds, and the store's claim), but
    # for the one retry of the killed trial.
    launched = [config_key(t.params) for t in complete]
    assert len(launched) == len(set(launched)) == BUDGET
    # Both workers ran trials, each on its own core, and at the same time.
    assert {t.worker_pid for t in trials} == {survivor, victim}
    binds = {t.worker_pid: t.launch_plan["env"]["VLLM_CPU_OMP_THREADS_BIND"] for t in trials}
    assert binds == {survivor: "0", victim: "1"}
    a, b = (min((t for t in trials if t.worker_pid == pid), key=lambda t: t.started_at)
            for pid in (survivor, victim))
    assert a.started_at < b.finished_at and b.started_at < a.finished_at
    done = f"worker done: study test-study has used {BUDGET} of {BUDGET} trials"
    assert done in workers_run.outputs[1]


def test_a_sigkilled_worker_trial_fails_is_retried_and_its_server_is_gone(workers_run):
    pg_url, killed, server = workers_run.url, workers_run.killed, workers_run.server
    store = Store.open(pg_url, create=False)
    study = optuna.load_study(study_name="test-study", storage=pg_url)
    # The killed trial ended FAIL in Optuna, failed (interrupted) in tuner's table.
    by_number = {t.number: t for t in study.trials}
    assert by_number[killed.number].state == TrialState.FAIL
    record = store.trial("test-study", killed.number)
    assert (record.state, record.failure_kind) == ("failed", "interrupted")
    assert "stopped sending heartbeats" in record.failure_reason
    assert record.measurements == []  # a trial is stored whole or not at all
    # ... and was retried once, with the same configuration, to completion by the survivor.
    retries = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    retried = store.trial("test-study", retries[0].number)
    assert (retried.state, retried.params) == ("complete", killed.params)
    assert retried.worker_pid == workers_run.survivor
    assert f"retry of trial {killed.number}" in workers_run.outputs[1]
    # No measurement row lost or duplicated: one per level of each complete trial.
    complete = [t for t in store.trials("test-study") if t.state == "complete"]
    rows = _measurement_rows(pg_url)
    assert len(rows) == len(set(rows)) == len(complete) * len(LEVELS)
    # No process of the killed worker's server is left.
    assert group_members(server.pgid, server.create_time) == []
    assert store.unstopped_servers(os.uname().nodename) == []


def test_a_storage_password_appears_in_no_output_log_or_export(workers_run):
    """The workers' study, created with the URL on the command line and run by workers given
    it in their environment (as a k8s Secret does), then read and exported with it."""
    from sqlalchemy.engine import make_url

    pg_url, folder = workers_run.url, workers_run.folder
    password = make_url(pg_url).password
    assert password and len(password) >= 12
    wrong = make_url(pg_url).set(password="Wr0ngPassw0rdX").render_as_string(hide_password=False)
    outputs = list(workers_run.outputs)  # --create-only --storage URL, then both workers
    assert "postgresql://tuner:***@" in outputs[0]

    def tuner(*args, expect=0):
        proc = subprocess.run([*TUNER, *map(str, args)], cwd=folder, capture_output=True,
                              text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        outputs.append(proc.stdout + proc.stderr)
        assert proc.returncode == expect, proc.stdout[-2000:] + proc.stderr[-2000:]
        return proc

    tuner("status", "--storage", pg_url)
    tuner("best", "--storage", pg_url)
    tuner("export", "--storage", pg_url, "--format", "vllm", "--format", "json", "--format",
          "k8s", "--format", "k8s-workers", "--image", "registry.example/tuner:1")
    tuner("worker", "--study", "nope", "--storage", pg_url, expect=2)
    denied = tuner("status", "--storage", wrong, expect=2)
    assert "password authentication failed" in denied.stderr
    assert "postgresql://tuner:***@" in denied.stderr

    assert (folder / "tuner-exports" / "test-study" / "k8s-workers.yaml").exists()
    files = [p for p in folder.rglob("*") if p.is_file() and p.suffix != ".safetensors"]
    assert any(p.name == "server.log" for p in files)  # the trials' logs are among them
    for secret in (password, "Wr0ngPassw0rdX"):
        for i, output in enumerate(outputs):
            assert secret not in output, f"command {i} printed the password"
        for p in files:
            assert secret not in p.read_text(errors="replace"), f"{p} holds the password"
    # Nor does tuner's own record of the study (which the dashboard shows) hold it.
    store = Store.open(pg_url, create=False)
    assert password not in str(store.get_study("test-study").spec)
    assert password not in str([t.launch_plan for t in store.trials("test-study")])


@pytest.mark.engine
def test_the_dashboard_reads_an_sqlite_study_while_it_runs(real_study):
    """WAL mode and retries: reading every page's data in a loop during a real study (conftest's
    `real_study`, two servers writing at once), no read fails with "database is locked" (or
    anything else), and the reads see the study progress."""
    reads = real_study.reads
    assert reads.errors == []
    assert reads.count > 20
    completes = [complete for _, complete in reads.seen]
    # The reads saw the study from before its first result, part done, to the end at most.
    assert completes[0] == 0
    assert any(0 < trials and complete < 2 for trials, complete in reads.seen)
    assert max(completes) <= 2
    assert completes == sorted(completes)  # a read never sees a finished trial vanish
    assert "database is locked" not in (real_study.folder / "run.out").read_text()
