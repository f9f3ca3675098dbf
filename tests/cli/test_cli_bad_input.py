"""Bad input: one line naming the problem and the fix, exit status 2, the database untouched."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import base_spec, run_tuner, write_yaml
from tuner.store import Store


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory with a real model config and a database that already holds a study."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        '{"num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8,'
        ' "vocab_size": 512}')
    store = Store.open(f"sqlite:///{tmp_path}/tuner.db")
    store.ensure_study("kept", engine="vllm", model=str(model), gpu_type="cpu", spec={},
                       space={}, tuner_version="test")
    store.close()
    return tmp_path


def run_bad(workdir: Path, spec: dict, *extra: str) -> str:
    write_yaml(workdir / "study.yaml", spec)
    before = digest(workdir / "tuner.db")
    proc = run_tuner("run", "study.yaml", *extra, cwd=workdir, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert digest(workdir / "tuner.db") == before
    assert Store.open(f"sqlite:///{workdir}/tuner.db").get_study("kept") is not None
    return lines[0]


def spec_for(workdir: Path, **overrides) -> dict:
    return base_spec(workdir / "model", **overrides)


def test_an_unknown_field_is_named(workdir):
    spec = spec_for(workdir)
    spec["workload"]["inptu_len"] = 64
    line = run_bad(workdir, spec)
    assert "workload.inptu_len" in line and "unknown field" in line


def test_a_wrong_type_is_named(workdir):
    line = run_bad(workdir, spec_for(workdir, budget={"n_trials": "many"}))
    assert "budget.n_trials" in line and "integer" in line


def test_an_empty_domain_is_named(workdir):
    write_yaml(workdir / "space.yaml", {"name": "s", "engine": "vllm",
                                        "parameters": {"max_batch_size": {"values": []}}})
    line = run_bad(workdir, spec_for(workdir, search_space="space.yaml"))
    assert "parameters.max_batch_size" in line and "empty domain" in line


def test_a_bad_prompt_file_line_is_named_before_anything_starts(workdir):
    (workdir / "prompts.jsonl").write_text('{"prompt": "fine"}\n{"messages": "oops"}\n')
    spec = spec_for(workdir)
    spec["workload"].update(prompt_source="file", prompt_file="prompts.jsonl", api="chat")
    line = run_bad(workdir, spec)
    assert "prompts.jsonl line 2: the conversation must be a non-empty list of turns" in line


def test_a_missing_model_path_says_how_to_make_one(workdir):
    spec = spec_for(workdir)
    spec["model"] = {"path": "nowhere/model"}
    line = run_bad(workdir, spec)
    assert "model.path nowhere/model does not exist" in line and "tuner model tiny" in line


def test_a_busy_port_is_named(workdir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        spec = spec_for(workdir)
        spec["engine"]["port"] = s.getsockname()[1]
        line = run_bad(workdir, spec)
    assert f"engine.port {spec['engine']['port']} is in use" in line


def test_a_missing_engine_executable_is_named(workdir):
    spec = spec_for(workdir)
    spec["engine"]["executable"] = "no-such-vllm"
    line = run_bad(workdir, spec)
    assert "engine.executable 'no-such-vllm' was not found" in line


def test_a_missing_spec_file(workdir):
    proc = run_tuner("run", "absent.yaml", cwd=workdir, timeout=60)
    assert proc.returncode == 2 and "absent.yaml does not exist" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("run", "study.yaml", "--bogus"), "No such option: --bogus"),
    (("nonsense",), "No such command 'nonsense'"),
    (("run",), "Missing argument 'STUDY.yaml'"),
])
def test_a_usage_error_is_one_line_and_bad_input(workdir, args, message):
    proc = run_tuner(*args, cwd=workdir, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_foreign_database_is_refused_and_left_alone(workdir):
    foreign = workdir / "other.db"
    con = sqlite3.connect(foreign)
    con.execute("create table invoices (id integer primary key, total real)")
    con.execute("insert into invoices values (1, 9.5)")
    con.commit()
    con.close()
    before = digest(foreign)
    line = run_bad(workdir, spec_for(workdir), "--storage", f"sqlite:///{foreign}")
    assert "not a tuner database" in line and "invoices" in line
    assert digest(foreign) == before


def test_a_file_that_is_not_a_database_is_refused_and_left_alone(workdir):
    junk = workdir / "notes.db"
    junk.write_text("these are my notes, not a database\n" * 50)
    before = digest(junk)
    run_bad(workdir, spec_for(workdir), "--storage", f"sqlite:///{junk}")
    assert digest(junk) == before


def test_reading_commands_do_not_create_a_database(tmp_path):
    proc = run_tuner("status", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "tuner run" in proc.stderr
    assert not (tmp_path / "tuner.db").exists()
