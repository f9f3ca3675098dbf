"""A trial's server log on its dashboard page: read from the study's run directory only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.report.test_dashboard_data import P, StudyWriter
from tuner.report import dashboard_data as dd


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'tuner.db'}"


def test_the_log_tail_comes_from_the_file_beside_the_database_else_from_the_store(url, tmp_path):
    log = tmp_path / "tuner-runs" / "s" / "trial-0000" / "server.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(f"line {i}" for i in range(200)))
    w = StudyWriter(url)
    w.fail(0, P(), "crash", "boom", log_tail="stored tail",
           log_path="tuner-runs/s/trial-0000/server.log")
    w.fail(1, P(2), "crash", "boom", log_tail="stored tail",
           log_path="tuner-runs/s/trial-0001/server.log")
    w.infeasible(2, P(1, True), "no")
    study = w.data().study
    t0, t1, t2 = w.data().trials
    text, source = dd.log_tail(study, t0, url, lines=5)
    assert text.splitlines() == [f"line {i}" for i in range(195, 200)]
    assert str(log) in source
    text, source = dd.log_tail(study, t1, url)
    assert text == "stored tail" and "not readable here" in source
    assert dd.log_tail(study, t2, url) == (
        None, "no server log: this trial never launched a server")


def test_a_log_path_outside_the_studys_run_directory_is_never_read(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("the password is hunter2\n")
    run = tmp_path / "tuner-runs" / "s"
    run.mkdir(parents=True)
    (run / "escape.log").symlink_to(secret)  # inside by name, outside in fact
    w = StudyWriter(url)
    for number, path in enumerate([str(secret), "tuner-runs/s/../../secret.txt",
                                   "tuner-runs/s/escape.log", "/etc/passwd"]):
        w.fail(number, P(1 + number % 2, batch=4 if number < 2 else 16), "crash", "boom",
               log_tail="stored tail", log_path=path)
    data = w.data()
    for trial in data.trials:
        text, source = dd.log_tail(data.study, trial, url)
        assert text == "stored tail", trial.log_path
        assert "outside the study's run directory" in source
        assert "hunter2" not in text + source


def test_a_relative_run_directory_is_also_found_from_the_current_folder(url, tmp_path,
                                                                        monkeypatch):
    elsewhere = tmp_path / "cwd"
    log = elsewhere / "runs" / "s" / "t" / "server.log"
    log.parent.mkdir(parents=True)
    log.write_text("served\n")
    monkeypatch.chdir(elsewhere)
    w = StudyWriter(url, spec={"runs_dir": "runs"})
    w.fail(0, P(), "crash", "boom", log_path="runs/s/t/server.log")
    data = w.data()
    assert dd.run_dirs(data.study, url)[0] == Path(os.getcwd()) / "runs" / "s"
    text, source = dd.log_tail(data.study, data.trials[0], url)
    assert text == "served" and str(elsewhere / "runs/s/t/server.log") in source
