"""Exit statuses a deploy pipeline can rely on, from the real command against the fake engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TUNER, base_spec, call_tuner, wait_for, write_yaml
from tuner.store import Store, StoreError
from tuner.testing.fake_engine import fake_engine_section, fake_model


@pytest.mark.parametrize("stage, landscape, printed", [
    ("starting", {"fail": "not_ready"}, "trial 0"),
    ("measuring", {"ttft_s": 0.01, "itl_s": 0.5}, "server ready"),  # 4 s a request
])
def test_a_study_stopped_by_sigterm_exits_130_and_records_the_trial_interrupted(
        tmp_path: Path, stage: str, landscape: dict, printed: str):
    (tmp_path / "landscape.json").write_text(json.dumps({"default": landscape}))
    write_yaml(tmp_path / "space.yaml", {"name": "one", "engine": "vllm", "parameters": {
        "max_batch_size": {"values": [4]}}})
    spec = base_spec(fake_model(tmp_path / "model"), space="space.yaml",
                     hardware={"gpu_type": "cpu", "devices": 1},
                     workload={"input_len": 8, "output_len": 8, "concurrency": [2],
                               "requests_per_level": 8},
                     budget={"n_trials": 1, "trial_timeout_s": 120, "confirm_top_k": 0})
    spec["engine"] = fake_engine_section(tmp_path, ready_timeout_s=120)
    write_yaml(tmp_path / "study.yaml", spec)
    out = open(tmp_path / "out.txt", "w")  # noqa: SIM115 (the child writes it)
    proc = subprocess.Popen([*TUNER, "run", "study.yaml"], cwd=tmp_path, stdout=out,
                            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        wait_for(lambda: printed in (tmp_path / "out.txt").read_text()
                 and trial_recorded(tmp_path / "tuner.db"), 60, stage)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    assert "interrupted: the running trial was stopped" in (tmp_path / "out.txt").read_text()
    with Store.open(f"sqlite:///{tmp_path / 'tuner.db'}", create=False) as store:
        (trial,) = store.trials("test-study")
        assert (trial.state, trial.failure_kind) == ("failed", "interrupted")


def trial_recorded(db: Path) -> bool:
    """Whether the study's trial is in tuner's table yet: the line printed before it is not
    enough on a busy machine, where a signal can land between the two."""
    if not db.exists():
        return False
    try:
        with Store.open(f"sqlite:///{db}", create=False) as store:
            return bool(store.trials("test-study"))
    except StoreError:
        return False


def test_an_unexpected_error_in_a_trial_is_recorded_with_its_text_and_stops_the_study(
        tmp_path: Path, monkeypatch):
    """A bug is no verdict on the configuration: the trial is `failed (error)` with the error's
    text and traceback, it spends no budget, and the study stops instead of repeating it."""
    import tuner.search.trial

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero in a level's figures")

    monkeypatch.setattr(tuner.search.trial, "measure", broken)
    (tmp_path / "landscape.json").write_text(json.dumps({"default": {}}))
    write_yaml(tmp_path / "space.yaml", {"name": "two", "engine": "vllm", "parameters": {
        "max_batch_size": {"values": [4, 8]}}})
    spec = base_spec(fake_model(tmp_path / "model"), space="space.yaml",
                     hardware={"gpu_type": "cpu", "devices": 1},
                     budget={"n_trials": 2, "trial_timeout_s": 120, "confirm_top_k": 0})
    spec["engine"] = fake_engine_section(tmp_path, ready_timeout_s=120)
    write_yaml(tmp_path / "study.yaml", spec)
    outcome = call_tuner("run", "study.yaml", cwd=tmp_path)
    assert outcome.code == 1, outcome
    (line,) = outcome.stderr.strip().splitlines()
    assert line.startswith("error: trial 0 stopped on an unexpected error (ZeroDivisionError: "
                           "division by zero in a level's figures)")
    with Store.open(f"sqlite:///{tmp_path / 'tuner.db'}", create=False) as store:
        (trial,) = store.trials("test-study")
        assert (trial.state, trial.failure_kind) == ("failed", "error")
        assert trial.failure_reason == "ZeroDivisionError: division by zero in a level's figures"
        assert "Traceback" in trial.log_tail and "broken" in trial.log_tail
        assert store.budget_used("test-study") == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_whose_interrupt_python_drops_still_stops_the_study(signum):
    """Python ignores what a handler raises while it runs a callback such as `__del__` or
    logging's fork hook (seen: SIGTERM as `tuner run` spawned its server, which then waited out
    its ready timeout). The study's stop event is set all the same, and the trial's wait loops
    check it."""
    import threading

    from tuner.search.loop import stop_signals_as_interrupt

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), signum)  # its KeyboardInterrupt is printed and dropped

    stop = threading.Event()
    before = signal.getsignal(signum)
    with stop_signals_as_interrupt(stop):
        SignalledWhileCollected()  # collected at once: no exception reaches this frame
        assert stop.is_set()
    assert signal.getsignal(signum) is before  # restored as it was (xdist's workers ignore SIGINT)
