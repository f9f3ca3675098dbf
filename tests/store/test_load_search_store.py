"""What revision 0006 stores: a trial's load search (its highest load that met the SLA, and why
it ended there) and each open-loop level's achieved rate and in-flight cap count; databases from
before it upgrade with nothing lost, and it downgrades."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import create_engine

from tests.store.test_store import STUDY, _level, _query, _query_write, _url
from tuner.store import Store
from tuner.store.bootstrap import _alembic_config


def _migrate(db_path: Path, how, revision: str) -> None:
    engine = create_engine(_url(db_path))
    with engine.begin() as connection:
        how(_alembic_config(connection), revision)
    engine.dispose()


def test_a_searched_trial_keeps_its_load_at_the_sla_and_its_curve(tmp_path: Path):
    with Store.open(_url(tmp_path / "tuner.db")) as store:
        store.ensure_study("s", **STUDY)
        trial_id = store.start_trial("s", 0, {"tp": 1}, worker_host="h", worker_pid=1)
        curve = [_level(c) for c in (1, 2, 4, 8, 6)]
        store.finish_trial(trial_id, state="complete", objective=1.0, meets_sla=True,
                           measurements=curve, load_at_sla=4,
                           load_search="c=4 met the SLA and c=6 missed it, within 50%")
        trial = store.trial("s", 0)
    assert [m.concurrency for m in trial.measurements] == [1, 2, 4, 8, 6]  # as measured
    assert trial.load_at_sla == 4
    assert trial.load_search == "c=4 met the SLA and c=6 missed it, within 50%"


def test_an_open_loop_level_keeps_its_achieved_rate_and_how_often_the_cap_held_it(tmp_path):
    with Store.open(_url(tmp_path / "tuner.db")) as store:
        store.ensure_study("s", **STUDY)
        trial_id = store.start_trial("s", 0, {"tp": 1}, worker_host="h", worker_pid=1)
        store.finish_trial(trial_id, state="complete", objective=1.0, meets_sla=True,
                           measurements=[
                               _level(64, request_rate=2.0, achieved_request_rate=1.98,
                                      capped_requests=0),
                               _level(64, request_rate=8.0, achieved_request_rate=5.5,
                                      capped_requests=17)])
        free, capped = store.trial("s", 0).measurements
    assert (free.achieved_request_rate, free.capped_requests, free.cap_engaged) == (
        1.98, 0, False)
    assert (capped.achieved_request_rate, capped.capped_requests, capped.cap_engaged) == (
        5.5, 17, True)


def test_a_database_from_revision_0005_upgrades_with_its_trials_and_downgrades(tmp_path):
    db_path = tmp_path / "tuner.db"
    _migrate(db_path, command.upgrade, "0005")
    _query_write(db_path, [
        "INSERT INTO tuner_studies (id, name, engine, model, gpu_type, spec, space, "
        "tuner_version, created_at) VALUES (1, 's', 'vllm', 'm', 'cpu', '{}', '{}', '0', "
        "'2026-01-01 00:00:00')",
        "INSERT INTO tuner_trials (id, study_id, number, state, params, objective, started_at) "
        "VALUES (1, 1, 0, 'complete', '{}', 12.5, '2026-01-01 00:00:00')",
    ])
    with Store.open(_url(db_path)) as store:  # migrates to the head
        trial = store.trial("s", 0)
    assert (trial.objective, trial.load_at_sla, trial.load_search) == (12.5, None, None)
    _migrate(db_path, command.downgrade, "0005")
    columns = {name for _, name, *_ in _query(db_path, "PRAGMA table_info(tuner_trials)")}
    assert "load_at_sla" not in columns and "objective" in columns
    assert _query(db_path, "SELECT objective FROM tuner_trials") == [(12.5,)]
