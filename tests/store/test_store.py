"""The study database: what tuner stores, what it refuses to touch, how it shares with Optuna."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import sqlite3
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import optuna
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

import db
from db.models import VERSION_TABLE, Base, MeasurementModel
from tuner.store import Store, StoreError
from tuner.store.records import LevelMeasurement

TUNER_TABLES = {"tuner_studies", "tuner_trials", "tuner_measurements", "tuner_servers",
                "tuner_predictions", "tuner_quality_references", "tuner_quality_checks",
                "tuner_head_to_heads"}
HEAD = ScriptDirectory(str(Path(db.__file__).parent / "migrations")).get_current_head()
STUDY = dict(
    engine="vllm",
    model="tiny-gpt-oss",
    gpu_type="cpu",
    spec={"workload": {"concurrency": [1, 8]}},
    space={"tp": [1, 2]},
    tuner_version="0.1.0",
)


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _query(path: Path, sql: str) -> list[tuple]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def _tables(path: Path) -> set[str]:
    return {name for (name,) in _query(path, "SELECT name FROM sqlite_master WHERE type='table'")}


def _level(concurrency: int, **changes: object) -> LevelMeasurement:
    values = dict(
        concurrency=concurrency,
        requests=10 * concurrency,
        errors=0,
        duration_s=12.5,
        input_tokens=1000 * concurrency,
        output_tokens=500 * concurrency,
        request_throughput=0.8 * concurrency,
        output_tok_s=40.25 * concurrency,
        output_tok_s_per_gpu=20.125 * concurrency,
        ttft_p50_ms=31.5,
        ttft_p90_ms=45.0,
        ttft_p99_ms=60.75,
        itl_p50_ms=5.5,
        itl_p90_ms=7.0,
        itl_p99_ms=9.25,
        tpot_p50_ms=5.75,
        tpot_p90_ms=7.5,
        e2e_p50_ms=800.0,
        e2e_p90_ms=950.5,
        tok_s_per_user_p50=173.9,
        tok_s_per_user_p90=133.3,
        goodput_rps=0.8 * concurrency,
        meets_sla=True,
        error_sample=None,
    )
    values.update(changes)
    return LevelMeasurement(**values)


def _one_line_error(excinfo: pytest.ExceptionInfo[StoreError]) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "tuner.db"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, db_path: Path):
    """The store contract: every test taking this fixture runs on SQLite and on PostgreSQL
    (the throwaway server `make test` starts), the two databases tuner supports."""
    url = _url(db_path) if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with Store.open(url) as store:
        store.ensure_study("s", **STUDY)
        yield store


# -- creating, reopening, sharing with Optuna ---------------------------------------------------


def test_a_fresh_database_gets_tuners_tables_and_reopening_changes_nothing(db_path: Path):
    with Store.open(_url(db_path)) as store:
        created = store.ensure_study("s", **STUDY)
        assert store.url == _url(db_path)
    with Store.open(_url(db_path), create=False) as store:
        assert store.list_studies() == [created]

    assert _tables(db_path) == TUNER_TABLES | {VERSION_TABLE}
    assert _query(db_path, f"SELECT version_num FROM {VERSION_TABLE}") == [(HEAD,)]


def test_optuna_creates_its_tables_in_the_same_file_and_both_keep_working(db_path: Path):
    url = _url(db_path)
    with Store.open(url) as store:
        store.ensure_study("s", **STUDY)
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(study_name="s", storage=storage)
    study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    storage.engine.dispose()

    with Store.open(url) as store:
        assert store.get_study("s") is not None
        assert [s.name for s in store.list_studies()] == ["s"]
    assert len(optuna.load_study(study_name="s", storage=url).trials) == 2
    # Each keeps its own schema revision in its own table.
    assert {"studies", "trials", "alembic_version"} <= _tables(db_path)
    assert _query(db_path, f"SELECT version_num FROM {VERSION_TABLE}") == [(HEAD,)]
    assert _query(db_path, "SELECT version_num FROM alembic_version") != [(HEAD,)]


def test_a_database_optuna_created_alone_is_another_programs_and_refused_untouched(
        db_path: Path):
    # An Optuna study's file is its program's; tuner's tables are not added to it.
    url = _url(db_path)
    optuna.create_study(study_name="o", storage=url).optimize(
        lambda trial: trial.suggest_float("x", 0, 1), n_trials=1
    )
    before = _sha256(db_path)
    with pytest.raises(StoreError, match="is not a tuner database .* and no tuner schema"):
        Store.open(url)
    assert _sha256(db_path) == before
    assert len(optuna.load_study(study_name="o", storage=url).trials) == 1


def test_sqlite_files_run_in_wal_mode_so_readers_do_not_block_the_writer(db_path: Path):
    with Store.open(_url(db_path)):
        assert _query(db_path, "PRAGMA journal_mode") == [("wal",)]


def test_workers_opening_a_fresh_database_at_once_migrate_it_once(db_path: Path):
    # Separate processes, as `tuner worker`s are; each would otherwise try to create the tables.
    code = "import sys; from tuner.store import Store; Store.open(sys.argv[1]).close()"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", code, _url(db_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(6)
    ]
    outcomes = [(worker.communicate(timeout=120)[0], worker.returncode) for worker in workers]

    assert outcomes == [("", 0)] * len(workers)
    assert _query(db_path, f"SELECT version_num FROM {VERSION_TABLE}") == [(HEAD,)]


def test_the_migration_creates_exactly_the_tables_the_models_declare(db_path: Path):
    Store.open(_url(db_path)).close()
    engine = create_engine(_url(db_path))
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"version_table": VERSION_TABLE, "compare_type": True}
        )
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()


def test_a_measurement_row_has_one_column_per_level_measurement_field():
    # Besides its keys: which trial, which run of it (0, or 1 for a confirmation), which level.
    keys = {"id", "trial_id", "run", "level"}
    columns = set(MeasurementModel.__table__.columns.keys()) - keys
    assert columns == {f.name for f in fields(LevelMeasurement)}


# -- studies ------------------------------------------------------------------------------------


def test_ensure_study_creates_once_then_returns_the_stored_study(store: Store):
    first = store.get_study("s")
    again = store.ensure_study("s", **{**STUDY, "engine": "trtllm"})

    assert again == first
    assert first.engine == "vllm" and first.spec == STUDY["spec"]
    assert first.created_at.tzinfo == dt.timezone.utc
    assert store.get_study("missing") is None


# -- trials -------------------------------------------------------------------------------------


def test_a_trial_runs_then_finishes_with_its_measurements_read_back_equal(store: Store):
    trial_id = store.start_trial(
        "s",
        0,
        {"tp": 2, "max_batch_size": 64},
        worker_host="node1",
        worker_pid=4242,
        launch_plan={"argv": ["vllm", "serve"], "port": 8001},
        gpus=2,
        hardware={"gpu": "H200", "count": 8},
        log_path="/runs/s/0.log",
    )
    [running] = store.running_trials("s")
    assert (running.id, running.state, running.finished_at) == (trial_id, "running", None)
    assert running.started_at.tzinfo == dt.timezone.utc

    levels = [_level(8, meets_sla=False, errors=2, error_sample="HTTP 500"), _level(1)]
    store.finish_trial(
        trial_id,
        state="complete",
        objective=321.5,
        meets_sla=True,
        log_tail="INFO ready",
        engine_version="0.32.0",
        measurements=levels,
    )

    trial = store.trial("s", 0)
    assert trial.measurements == levels  # in sweep order, as measured
    assert (trial.state, trial.objective, trial.meets_sla) == ("complete", 321.5, True)
    assert (trial.engine_version, trial.log_tail) == ("0.32.0", "INFO ready")
    assert (trial.failure_kind, trial.failure_reason) == (None, None)
    assert trial.params == {"tp": 2, "max_batch_size": 64}
    assert trial.launch_plan == {"argv": ["vllm", "serve"], "port": 8001}
    assert (trial.gpus, trial.hardware) == (2, {"gpu": "H200", "count": 8})
    assert (trial.worker_host, trial.worker_pid, trial.log_path) == ("node1", 4242, "/runs/s/0.log")
    assert trial.finished_at.tzinfo == dt.timezone.utc
    assert trial.started_at <= trial.finished_at
    assert store.running_trials("s") == []


def test_a_failed_trial_keeps_its_failure_and_no_measurements(store: Store):
    trial_id = store.start_trial("s", 0, {"tp": 8}, worker_host="h", worker_pid=1)
    store.finish_trial(
        trial_id,
        state="failed",
        failure_kind="oom",
        failure_reason="CUDA out of memory",
        log_tail="torch.OutOfMemoryError",
    )
    trial = store.trial("s", 0)
    assert (trial.state, trial.failure_kind, trial.failure_reason) == (
        "failed",
        "oom",
        "CUDA out of memory",
    )
    assert (trial.objective, trial.meets_sla, trial.measurements) == (None, None, [])
    assert (trial.launch_plan, trial.hardware) == (None, None)


def test_finish_trial_stores_everything_or_nothing(store: Store):
    trial_id = store.start_trial("s", 0, {"tp": 1}, worker_host="h", worker_pid=1)

    with pytest.raises(StoreError) as excinfo:
        store.finish_trial(
            trial_id, state="complete", objective=1.0,
            measurements=[_level(1), _level(8, requests=None)],  # the second row is invalid
        )
    # Each database names the broken constraint its own way.
    assert any(word in _one_line_error(excinfo) for word in ("NOT NULL", "not-null"))
    trial = store.trial("s", 0)
    assert (trial.state, trial.finished_at, trial.objective, trial.measurements) == (
        "running",
        None,
        None,
        [],
    )

    store.finish_trial(trial_id, state="complete", measurements=[_level(1)])
    assert store.trial("s", 0).measurements == [_level(1)]


def test_a_finished_trial_cannot_be_finished_again(store: Store):
    trial_id = store.start_trial("s", 0, {}, worker_host="h", worker_pid=1)
    store.finish_trial(trial_id, state="complete", objective=2.0)
    with pytest.raises(StoreError, match="already complete"):
        store.finish_trial(trial_id, state="failed", failure_kind="crash")
    assert store.trial("s", 0).objective == 2.0


@pytest.mark.parametrize("state", ["running", "done", "COMPLETE"])
def test_finish_trial_rejects_a_state_that_is_not_a_finished_one(store: Store, state: str):
    trial_id = store.start_trial("s", 0, {}, worker_host="h", worker_pid=1)
    with pytest.raises(ValueError, match=repr(state)):
        store.finish_trial(trial_id, state=state)
    assert store.trial("s", 0).state == "running"


def test_a_trial_number_is_recorded_once_per_study(store: Store):
    store.start_trial("s", 0, {}, worker_host="h", worker_pid=1)
    with pytest.raises(StoreError, match="already recorded") as excinfo:
        store.start_trial("s", 0, {}, worker_host="h", worker_pid=2)
    _one_line_error(excinfo)
    with pytest.raises(StoreError, match="already recorded"):
        store.record_infeasible("s", 0, {}, "too big")

    store.ensure_study("other", **STUDY)
    store.start_trial("other", 0, {}, worker_host="h", worker_pid=1)  # numbers are per study


def test_a_trial_of_an_unknown_study_is_refused(store: Store):
    with pytest.raises(StoreError, match="no study named 'nope'"):
        store.start_trial("nope", 0, {}, worker_host="h", worker_pid=1)
    assert store.trials("nope") == []
    assert store.trial("nope", 0) is None


def test_trials_are_listed_by_number(store: Store):
    for number in (2, 0, 1):
        store.start_trial("s", number, {"n": number}, worker_host="h", worker_pid=1)
    assert [t.number for t in store.trials("s")] == [0, 1, 2]
    assert [t.params for t in store.trials("s")] == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert {t.study_name for t in store.trials("s")} == {"s"}


def test_an_infeasible_trial_is_recorded_finished_without_a_launch(store: Store):
    trial_id = store.record_infeasible("s", 3, {"tp": 3}, "tp 3 does not divide 64 heads")

    trial = store.trial("s", 3)
    assert trial.id == trial_id
    assert (trial.state, trial.failure_kind) == ("infeasible", "infeasible")
    assert trial.failure_reason == "tp 3 does not divide 64 heads"
    assert trial.params == {"tp": 3}
    assert trial.finished_at == trial.started_at
    assert trial.measurements == []
    assert store.running_trials("s") == []


# -- servers ------------------------------------------------------------------------------------


def test_servers_stay_listed_on_their_host_until_marked_stopped(store: Store):
    first = store.start_trial("s", 0, {}, worker_host="a", worker_pid=1)
    second = store.start_trial("s", 1, {}, worker_host="a", worker_pid=1)
    elsewhere = store.start_trial("s", 2, {}, worker_host="b", worker_pid=1)
    owner = {"owner_pid": 7, "owner_create_time": 1.6e9}
    store.record_server(first, host="a", pid=100, pgid=100, create_time=1.7e9 + 0.25,
                        log_path="0", **owner)
    store.record_server(second, host="a", pid=200, pgid=200, create_time=1.7e9 + 9.5,
                        log_path="1", **owner)
    store.record_server(elsewhere, host="b", pid=100, pgid=100, create_time=1.0, log_path="2",
                        **owner)

    servers = store.unstopped_servers("a")
    assert [(s.trial_id, s.pid, s.pgid, s.create_time) for s in servers] == [
        (first, 100, 100, 1.7e9 + 0.25),
        (second, 200, 200, 1.7e9 + 9.5),
    ]
    assert servers[0].host == "a" and servers[0].log_path == "0"
    assert (servers[0].owner_pid, servers[0].owner_create_time) == (7, 1.6e9)  # not the worker
    assert servers[0].started_at.tzinfo == dt.timezone.utc

    store.mark_server_stopped(first)
    store.mark_server_stopped(first)  # tearing down twice is harmless
    assert [s.trial_id for s in store.unstopped_servers("a")] == [second]
    assert [s.trial_id for s in store.unstopped_servers("b")] == [elsewhere]
    assert store.unstopped_servers("c") == []


def test_a_server_of_an_unknown_trial_is_refused(store: Store):
    with pytest.raises(StoreError, match="no trial with id 999"):
        store.record_server(999, host="a", pid=1, pgid=1, create_time=1.0, log_path="x",
                            owner_pid=1, owner_create_time=1.0)


def test_a_server_row_from_before_owners_names_its_trials_worker(db_path: Path):
    schema_at(db_path, "0005")
    _query_write(db_path, [
        "INSERT INTO tuner_studies (id, name, engine, model, gpu_type, spec, space, "
        "tuner_version, created_at) VALUES (1, 's', 'vllm', 'm', 'cpu', '{}', '{}', '0', "
        "'2026-01-01 00:00:00')",
        "INSERT INTO tuner_trials (id, study_id, number, state, params, started_at, worker_host, "
        "worker_pid) VALUES (2, 1, 1, 'running', '{}', '2026-01-01 00:00:00', 'a', 4242)",
        "INSERT INTO tuner_servers (trial_id, host, pid, pgid, create_time, log_path, "
        "started_at) VALUES (2, 'a', 100, 100, 1.0, 'x', '2026-01-01 00:00:00')",
    ])
    with Store.open(_url(db_path)) as store:  # a writer: migrates to 0007
        (server,) = store.unstopped_servers("a")
    assert (server.owner_pid, server.owner_create_time) == (4242, None)


# -- what Store.open refuses, leaving every byte as it was --------------------------------------


def test_a_foreign_sqlite_database_is_refused_untouched(db_path: Path):
    connection = sqlite3.connect(db_path)
    connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    connection.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    connection.commit()
    connection.close()
    before = _sha256(db_path)

    with pytest.raises(StoreError) as excinfo:
        Store.open(_url(db_path))

    message = _one_line_error(excinfo)
    assert "is not a tuner database (it has tables orders, users)" in message
    assert "--storage" in message
    assert _sha256(db_path) == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["tuner.db"]


def test_a_file_that_is_not_sqlite_is_refused_untouched(db_path: Path):
    db_path.write_text("model: gpt-oss-120b\nengine: vllm\n")
    before = _sha256(db_path)

    with pytest.raises(StoreError) as excinfo:
        Store.open(_url(db_path))

    assert "is not an SQLite database" in _one_line_error(excinfo)
    assert _sha256(db_path) == before


def test_a_directory_is_refused_untouched(tmp_path: Path):
    directory = tmp_path / "runs"
    directory.mkdir()

    with pytest.raises(StoreError) as excinfo:
        Store.open(_url(directory))

    assert "is a directory" in _one_line_error(excinfo)
    assert list(directory.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_refused_untouched(db_path: Path):
    Store.open(_url(db_path)).close()
    before = _sha256(db_path)
    db_path.chmod(0)
    try:
        with pytest.raises(StoreError) as excinfo:
            Store.open(_url(db_path))
        assert "permission denied" in _one_line_error(excinfo)
    finally:
        db_path.chmod(0o600)
    assert _sha256(db_path) == before


def test_without_create_a_missing_database_is_an_error_and_stays_missing(db_path: Path):
    with pytest.raises(StoreError) as excinfo:
        Store.open(_url(db_path), create=False)

    message = _one_line_error(excinfo)
    assert f"no study database at {db_path}" in message and "tuner run" in message
    assert list(db_path.parent.iterdir()) == []


def test_without_create_an_optuna_only_database_is_an_error_and_untouched(db_path: Path):
    optuna.create_study(study_name="o", storage=_url(db_path))
    before = _sha256(db_path)

    with pytest.raises(StoreError, match="is not a tuner database"):
        Store.open(_url(db_path), create=False)
    assert _sha256(db_path) == before


def test_a_missing_directory_for_a_new_database_is_an_error(tmp_path: Path):
    with pytest.raises(StoreError, match="does not exist") as excinfo:
        Store.open(_url(tmp_path / "absent" / "tuner.db"))
    _one_line_error(excinfo)
    assert not (tmp_path / "absent").exists()


def test_a_database_from_a_newer_tuner_is_refused_untouched(db_path: Path):
    Store.open(_url(db_path)).close()
    connection = sqlite3.connect(db_path)
    connection.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9999_from_the_future'")
    connection.commit()
    connection.close()
    before = _sha256(db_path)

    with pytest.raises(StoreError) as excinfo:
        Store.open(_url(db_path))

    message = _one_line_error(excinfo)
    assert "created by a newer tuner" in message and "9999_from_the_future" in message
    assert _sha256(db_path) == before


def test_an_unparsable_url_is_a_store_error():
    with pytest.raises(StoreError, match="cannot parse storage URL"):
        Store.open("not a url")


def test_a_storage_url_is_printed_without_its_password():
    from tuner.store import mask_url

    shown = mask_url("postgresql+psycopg://tuner:s3cr3t@db.internal:5432/studies")
    assert shown == "postgresql+psycopg://tuner:***@db.internal:5432/studies"
    assert mask_url("sqlite:///tuner.db") == "sqlite:///tuner.db"
    assert mask_url("not a url at all") == "<storage url>"


# -- runs, levels and confirmations ------------------------------------------------------------


def test_a_confirmation_is_stored_beside_the_first_run_and_replaces_an_earlier_one(store: Store):
    trial_id = store.start_trial("s", 0, {"tp": 1}, worker_host="h", worker_pid=1)
    first = [_level(1), _level(8)]
    store.finish_trial(trial_id, state="complete", objective=161.0, meets_sla=True,
                       measurements=first)
    store.record_confirmation("s", 0, state="differs", objective=90.0, meets_sla=True,
                              reason="first", measurements=[_level(1, output_tok_s_per_gpu=9.0)])
    again = [_level(1, output_tok_s_per_gpu=150.0), _level(8, output_tok_s_per_gpu=158.0)]
    store.record_confirmation("s", 0, state="confirmed", objective=158.0, meets_sla=True,
                              reason=None, measurements=again)

    trial = store.trial("s", 0)
    assert trial.measurements == first
    assert trial.confirmation == again
    assert (trial.confirm_state, trial.confirm_objective, trial.confirm_reason) == (
        "confirmed", 158.0, None)
    assert trial.confirmed_at.tzinfo == dt.timezone.utc


def test_only_a_complete_trial_can_be_confirmed(store: Store):
    trial_id = store.start_trial("s", 0, {"tp": 1}, worker_host="h", worker_pid=1)
    with pytest.raises(StoreError) as excinfo:
        store.record_confirmation("s", 0, state="confirmed", objective=1.0, meets_sla=True,
                                  reason=None)
    assert "only complete trials are confirmed" in _one_line_error(excinfo)
    store.finish_trial(trial_id, state="failed", failure_kind="crash", failure_reason="x")
    with pytest.raises(StoreError):
        store.record_confirmation("s", 0, state="confirmed", objective=1.0, meets_sla=True,
                                  reason=None)
    assert store.trial("s", 0).confirm_state is None


def test_open_loop_levels_may_share_a_concurrency_cap(store: Store):
    trial_id = store.start_trial("s", 0, {"tp": 1}, worker_host="h", worker_pid=1)
    levels = [_level(64, request_rate=rate) for rate in (2.0, 4.0, 8.0)]
    store.finish_trial(trial_id, state="complete", objective=1.0, meets_sla=True,
                       measurements=levels)
    assert [m.request_rate for m in store.trial("s", 0).measurements] == [2.0, 4.0, 8.0]


def schema_at(db_path: Path, revision: str) -> None:
    """An SQLite database with tuner's tables as of `revision`, empty."""
    from alembic import command

    from tuner.store.bootstrap import _alembic_config

    engine = create_engine(_url(db_path))
    with engine.begin() as connection:
        config = _alembic_config(connection)
        command.upgrade(config, revision)
    engine.dispose()


def build_old_schema(db_path: Path) -> None:
    """An SQLite database as a tuner of schema revision 0003 left it, with one study, one trial
    and three measurements in that revision's columns."""
    schema_at(db_path, "0003")
    _query_write(db_path, [
        "INSERT INTO tuner_studies (id, name, engine, model, gpu_type, spec, space, "
        "tuner_version, created_at) VALUES (1, 's', 'vllm', 'm', 'cpu', '{}', '{}', '0', "
        "'2026-01-01 00:00:00')",
        "INSERT INTO tuner_trials (id, study_id, number, state, params, started_at) "
        "VALUES (1, 1, 0, 'complete', '{}', '2026-01-01 00:00:00')",
        *(f"INSERT INTO tuner_measurements ({', '.join(_LEGACY_COLUMNS)}) VALUES "
          f"(1, {c}, 10, 0, 1.0, 10, 10, 1.0, 10.0, 10.0, 1.0, 1)" for c in (16, 1, 4)),
    ])


def test_rows_measured_before_revision_0004_get_their_sweep_position(db_path: Path):
    build_old_schema(db_path)
    with Store.open(_url(db_path)) as store:
        trial = store.trial("s", 0)
    assert [m.concurrency for m in trial.measurements] == [1, 4, 16]
    assert _query(db_path, "SELECT concurrency, level, run FROM tuner_measurements "
                  "ORDER BY level") == [(1, 0, 0), (4, 1, 0), (16, 2, 0)]


_LEGACY_COLUMNS = ("trial_id", "concurrency", "requests", "errors", "duration_s", "input_tokens",
                   "output_tokens", "request_throughput", "output_tok_s", "output_tok_s_per_gpu",
                   "goodput_rps", "meets_sla")


def _query_write(path: Path, statements: list[str]) -> None:
    connection = sqlite3.connect(path)
    try:
        for sql in statements:
            connection.execute(sql)
        connection.commit()
    finally:
        connection.close()


@pytest.mark.parametrize("tables", [["studies"], ["studies", "trials"], ["alembic_version"]])
def test_another_programs_file_with_tables_named_like_optunas_is_refused_untouched(
        db_path: Path, tables: list[str]):
    con = sqlite3.connect(db_path)
    for t in tables:
        con.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, name TEXT)")
    con.commit()
    con.close()
    before = _sha256(db_path)

    with pytest.raises(StoreError) as excinfo:
        Store.open(_url(db_path))

    message = _one_line_error(excinfo)
    assert f"is not a tuner database (it has tables {', '.join(tables)} and no tuner schema)" \
        in message
    assert _sha256(db_path) == before
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["tuner.db"]


def test_the_optuna_tables_tuner_accepts_are_the_installed_optunas():
    # The one place tuner's tests read Optuna's private schema: an upgrade that changes its
    # tables fails here, not in a user's database check.
    from optuna.storages._rdb import models

    from db.models import OPTUNA_TABLES

    assert OPTUNA_TABLES == set(models.BaseModel.metadata.tables) | {"alembic_version"}


@pytest.mark.parametrize("mark", ["file", "folder"])
def test_a_database_marked_read_only_is_refused_to_a_writer_even_as_root_and_read_by_readers(
        db_path: Path, mark: str):
    url = _url(db_path)
    with Store.open(url) as store:
        store.ensure_study("s", **STUDY)
    target = db_path if mark == "file" else db_path.parent
    target.chmod(0o444 if mark == "file" else 0o555)
    try:
        before = _sha256(db_path)
        with pytest.raises(StoreError) as excinfo:
            Store.open(url)  # a writer (tuner run)
        assert "is read-only" in _one_line_error(excinfo) and "chmod u+w" in str(excinfo.value)
        with Store.open(url, create=False) as store:  # a reader (status, best, dashboard)
            assert [s.name for s in store.list_studies()] == ["s"]
        assert _sha256(db_path) == before
    finally:
        target.chmod(0o644 if mark == "file" else 0o755)
