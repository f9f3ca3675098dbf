"""Bad input: one line naming the problem and the fix, exit status 2, the database untouched."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.conftest import base_spec, call_tuner, run_tuner, write_yaml
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
    """`tuner run` of `spec`, in this process (`call_tuner`): its one-line error."""
    write_yaml(workdir / "study.yaml", spec)
    before = digest(workdir / "tuner.db")
    outcome = call_tuner("run", "study.yaml", *extra, cwd=workdir)
    assert outcome.code == 2, outcome.stdout + outcome.stderr
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1, outcome.stderr
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
    outcome = call_tuner("run", "absent.yaml", cwd=workdir)
    assert outcome.code == 2 and "absent.yaml does not exist" in outcome.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("run", "study.yaml", "--bogus"), "No such option: --bogus"),
    (("nonsense",), "No such command 'nonsense'"),
    (("run",), "Missing argument 'STUDY.yaml'"),
])
def test_a_usage_error_is_one_line_and_bad_input(workdir, args, message):
    # The console script itself, in a process of its own: what a user's shell sees.
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
    outcome = call_tuner("status", cwd=tmp_path)
    assert outcome.code == 2 and "tuner run" in outcome.stderr
    assert not (tmp_path / "tuner.db").exists()


def fresh_study(tmp_path: Path, **overrides) -> Path:
    """A directory with a study spec whose model has a word-level tokenizer of the corpus, and
    no database."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from tuner.measure.prompts import CORPUS

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        '{"num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8,'
        ' "vocab_size": 512}')
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator([CORPUS.read_text()],
                                  trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(model / "tokenizer.json"))
    write_yaml(tmp_path / "study.yaml", base_spec(model, **overrides))
    return tmp_path


def refused_in_process(workdir: Path, *args: str) -> str:
    outcome = call_tuner(*args, cwd=workdir)
    assert outcome.code == 2, outcome
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), outcome.stderr
    return lines[0]


@pytest.mark.parametrize("command", [("run", "study.yaml"),
                                     ("run", "study.yaml", "--create-only")])
def test_an_input_len_beyond_the_corpus_is_found_before_a_database_or_server(tmp_path, command):
    d = fresh_study(tmp_path)
    spec = yaml.safe_load((d / "study.yaml").read_text())
    spec["workload"].update(prompt_source="corpus", input_len=5000)
    write_yaml(d / "study.yaml", spec)
    line = refused_in_process(d, *command)
    assert "workload" in line and "input_len 5000" in line and "corpus" in line
    assert not (d / "tuner.db").exists() and not (d / "tuner-runs").exists()


def test_a_string_where_a_size_belongs_creates_no_database(tmp_path):
    d = fresh_study(tmp_path, search_space="space.yaml")
    write_yaml(d / "space.yaml", {"name": "s", "engine": "vllm",
                                  "parameters": {"max_batch_size": {"values": [4, "sixteen"]}}})
    line = refused_in_process(d, "run", "study.yaml", "--create-only")
    assert "max_batch_size value 'sixteen'" in line and "positive integers" in line
    assert not (d / "tuner.db").exists()


def test_a_missing_model_creates_no_database_and_its_fix_is_quoted_for_the_shell(tmp_path):
    d = fresh_study(tmp_path)
    spec = yaml.safe_load((d / "study.yaml").read_text())
    spec["model"] = {"path": "my models/$HOME; rm -rf x"}
    write_yaml(d / "study.yaml", spec)
    line = refused_in_process(d, "run", "study.yaml", "--create-only")
    assert "`tuner model tiny --out 'my models/$HOME; rm -rf x'`" in line
    assert not (d / "tuner.db").exists()


def test_a_read_only_database_is_one_line_and_left_alone(tmp_path):
    d = fresh_study(tmp_path)
    assert call_tuner("run", "study.yaml", "--create-only", cwd=d).code == 0
    before = digest(d / "tuner.db")
    read_only = "sqlite:///file:tuner.db?mode=ro&uri=true"
    line = refused_in_process(d, "run", "study.yaml", "--create-only", "--study-name", "other",
                              "--storage", read_only)
    assert "readonly database" in line
    assert digest(d / "tuner.db") == before


def test_requests_longer_than_the_models_context_are_refused_before_a_server(tmp_path):
    d = fresh_study(tmp_path)
    (d / "model" / "config.json").write_text(
        '{"num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8,'
        ' "vocab_size": 512, "max_position_embeddings": 1024}')
    spec = yaml.safe_load((d / "study.yaml").read_text())
    spec["workload"].update(input_len=1000, output_len=20, range_ratio=0.1)
    write_yaml(d / "study.yaml", spec)
    line = refused_in_process(d, "run", "study.yaml")
    assert "a request needs up to 1,122 tokens and the model's context holds 1,024" in line
    assert not (d / "tuner.db").exists()


def test_confirming_a_study_that_is_not_there_creates_nothing_and_quotes_the_spec(tmp_path):
    d = fresh_study(tmp_path)
    (d / "study.yaml").rename(d / "my study.yaml")
    line = refused_in_process(d, "confirm", "my study.yaml")
    assert "no study database" in line and not (d / "tuner.db").exists()
    assert call_tuner("run", "my study.yaml", "--create-only", "--study-name", "other",
                      cwd=d).code == 0
    before = digest(d / "tuner.db")
    line = refused_in_process(d, "confirm", "my study.yaml")
    assert "study test-study is not in" in line and "`tuner run 'my study.yaml'` first" in line
    assert digest(d / "tuner.db") == before


@pytest.mark.parametrize("command", [("run", "study.yaml"), ("worker",),
                                     ("confirm", "study.yaml")])
def test_a_study_in_a_read_only_database_is_one_line_not_a_traceback(tmp_path, command):
    """The study is there and the spec matches, so the first write is Optuna's (its
    StorageInternalError) or SQLAlchemy's: the boundary in main() says it in one line."""
    from tuner.testing.fake_engine import fake_vllm

    d = fresh_study(tmp_path)
    spec = yaml.safe_load((d / "study.yaml").read_text())
    spec["engine"]["executable"] = str(fake_vllm(d / "bin"))
    write_yaml(d / "study.yaml", spec)
    assert call_tuner("run", "study.yaml", "--create-only", cwd=d).code == 0
    before = digest(d / "tuner.db")
    line = refused_in_process(d, *command, "--storage",
                              "sqlite:///file:tuner.db?mode=ro&uri=true")
    assert "the study database cannot be used as given (attempt to write a readonly" in line
    assert digest(d / "tuner.db") == before


def test_a_database_host_that_accepts_and_never_answers_is_an_error_within_its_timeout(
        tmp_path, monkeypatch):
    import threading

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(silent.accept()[0]), daemon=True).start()
    port = silent.getsockname()[1]
    monkeypatch.setenv("TUNER_DB_CONNECT_TIMEOUT_S", "2")
    try:
        # Without a connect timeout this never returns: the subprocess's limit fails the test.
        done = run_tuner("status", "--storage", f"postgresql://tuner:s3cret@127.0.0.1:{port}/db",
                         cwd=tmp_path, timeout=120)
    finally:
        silent.close()
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"127.0.0.1:{port}" in line and "s3cret" not in line and "timeout" in line.lower()
