"""The study database: tuner's records, kept beside Optuna's tables in the same database.

This is the only storage API the rest of tuner uses. A database is checked before anything is
written to it: a file that is not tuner's (or Optuna's) is refused and left exactly as it was.
SQLite files run in WAL mode so a dashboard can read while a study writes.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from optuna.storages._rdb import models as optuna_models
from sqlalchemy import (
    Connection,
    Engine,
    Select,
    and_,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    or_,
    select,
    update,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, selectinload, sessionmaker
from sqlalchemy.pool import NullPool

import db
from db.models import (
    TABLE_PREFIX,
    TRIAL_STATES,
    VERSION_TABLE,
    MeasurementModel,
    PredictionModel,
    ServerModel,
    StudyModel,
    TrialModel,
)
from tuner.store.records import BUDGET_STATES, NOT_COUNTED_FAILURES, LevelMeasurement

__all__ = ["BudgetSpent", "PredictionRecord", "ServerRecord", "Store", "StoreError",
           "StudyRecord", "TrialRecord"]

_MIGRATIONS = Path(db.__file__).resolve().parent / "migrations"
_SQLITE_HEADER = b"SQLite format 3\x00"
_SQLITE_TIMEOUT_S = 30  # how long a writer waits for another's lock before failing
_FINISHED_STATES = tuple(s for s in TRIAL_STATES if s != "running")
# Any fixed key: serializes migrations of workers sharing one PostgreSQL database.
_PG_MIGRATION_LOCK = 7_202_511
# With the study's own key: serializes workers claiming a trial of one study's budget.
_PG_BUDGET_LOCK = 7_202_512


class StoreError(Exception):
    """The study database cannot do what was asked. str(e) is one line: the problem and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class BudgetSpent(Exception):
    """A trial was refused because the study's budget is spent (by this or another worker)."""


@dataclass
class StudyRecord:
    id: int
    name: str
    engine: str
    model: str
    gpu_type: str
    spec: dict
    space: dict
    tuner_version: str
    created_at: dt.datetime


@dataclass
class TrialRecord:
    id: int
    study_name: str
    number: int
    state: str
    params: dict
    launch_plan: dict | None
    objective: float | None
    meets_sla: bool | None
    failure_kind: str | None
    failure_reason: str | None
    log_tail: str | None
    log_path: str | None
    engine_version: str | None
    gpus: int | None
    hardware: dict | None
    worker_host: str | None
    worker_pid: int | None
    started_at: dt.datetime
    finished_at: dt.datetime | None
    measurements: list[LevelMeasurement]  # the trial's own sweep, in sweep order
    # Its re-run in a fresh server (`tuner confirm`); None and [] until confirmed.
    confirm_state: str | None = None  # confirmed | differs | failed
    confirm_objective: float | None = None
    confirm_meets_sla: bool | None = None
    confirm_reason: str | None = None
    confirmed_at: dt.datetime | None = None
    confirmation: list[LevelMeasurement] = field(default_factory=list)


@dataclass
class PredictionRecord:
    """A stored prediction (never a measurement): one configuration at one concurrency level."""

    study_name: str
    source: str
    engine: str
    gpu_type: str
    calibration: str
    config_key: str
    params: dict
    concurrency: int
    fits: bool
    output_tok_s_per_gpu: float
    tok_s_per_user: float
    ttft_ms: float
    meets_sla: bool
    reason: str | None
    created_at: dt.datetime


@dataclass
class ServerRecord:
    trial_id: int
    host: str
    pid: int
    pgid: int
    create_time: float
    log_path: str
    started_at: dt.datetime
    worker_pid: int | None = None  # the tuner process that launched it


class Store:
    """tuner's records in one database. Open it with `Store.open(url)`; close it when done."""

    def __init__(self, engine: Engine, url: str, where: str) -> None:
        self._engine = engine
        self._url = url
        self._where = where  # the file path or the URL without its password, for messages
        self._sessions = sessionmaker(bind=engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str, *, create: bool = True) -> Store:
        """Check the database, then bring tuner's tables up to date (creating them if allowed).

        Nothing is written before every check has passed, and nothing at all to a database that
        is already up to date, so a dashboard can open one it may only read.
        """
        parsed = _parse_url(url)
        path = _sqlite_file(parsed)
        where = str(path) if path is not None else parsed.render_as_string(hide_password=True)
        if path is not None:
            _check_sqlite_path(path, create=create)
        engine = _create_engine(parsed, where)
        try:
            revisions = _check_contents(engine, where, sqlite_file=path is not None, create=create)
            if path is not None:
                _use_wal(engine)
            if revisions != {_head_revision()}:
                _upgrade(engine, parsed)
        except StoreError:
            engine.dispose()
            raise
        except (SQLAlchemyError, CommandError) as e:
            engine.dispose()
            raise StoreError(
                f"cannot open {where}: {_cause(e)}: check the database is reachable and writable"
            ) from e
        return cls(engine, url, where)

    @property
    def url(self) -> str:
        return self._url

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def setup_lock(self) -> Iterator[None]:
        """Held while Optuna creates or checks its own tables in this database. On PostgreSQL,
        workers starting at once on a fresh database would race on CREATE TABLE; this is the
        lock tuner's own migrations take, so setups run one at a time."""
        if self._engine.dialect.name != "postgresql":
            yield
            return
        try:
            connection = self._engine.connect()
            connection.exec_driver_sql(f"SELECT pg_advisory_lock({_PG_MIGRATION_LOCK})")
            connection.commit()
        except SQLAlchemyError as e:
            raise StoreError(f"cannot lock {self._where} for setup: {_cause(e)}") from e
        try:
            yield
        finally:
            connection.exec_driver_sql(f"SELECT pg_advisory_unlock({_PG_MIGRATION_LOCK})")
            connection.commit()
            connection.close()

    # -- studies ------------------------------------------------------------------------------

    def ensure_study(
        self,
        name: str,
        *,
        engine: str,
        model: str,
        gpu_type: str,
        spec: dict,
        space: dict,
        tuner_version: str,
    ) -> StudyRecord:
        """The study of this name, created with these values if it does not exist yet.

        An existing study is returned as stored: the caller compares it with what it expected.
        """
        existing = self.get_study(name)
        if existing is not None:
            return existing
        row = StudyModel(
            name=name,
            engine=engine,
            model=model,
            gpu_type=gpu_type,
            spec=spec,
            space=space,
            tuner_version=tuner_version,
            created_at=_now(),
        )
        try:
            with self._session(f"create study {name!r}") as session:
                session.add(row)
                session.flush()
                return _study_record(row)
        except StoreError as e:
            # Another worker created it between our read and our write: theirs is the study.
            if isinstance(e.__cause__, IntegrityError):
                raced = self.get_study(name)
                if raced is not None:
                    return raced
            raise

    def get_study(self, name: str) -> StudyRecord | None:
        with self._session(f"read study {name!r}") as session:
            row = StudyModel.find_by_name(name, session)
            return None if row is None else _study_record(row)

    def list_studies(self) -> list[StudyRecord]:
        with self._session("list studies") as session:
            rows = session.scalars(select(StudyModel).order_by(StudyModel.id))
            return [_study_record(row) for row in rows]

    # -- trials -------------------------------------------------------------------------------

    def start_trial(
        self,
        study_name: str,
        number: int,
        params: dict,
        *,
        worker_host: str,
        worker_pid: int,
        launch_plan: dict | None = None,
        gpus: int | None = None,
        hardware: dict | None = None,
        log_path: str | None = None,
        budget: int | None = None,
    ) -> int:
        """Record Optuna trial `number` as running, started now. Returns the trial's id.

        With a `budget`, the claim is atomic across workers: under a lock held by one claimer of
        the study at a time, the trials that count (see `budget_used`) are counted, and
        BudgetSpent is raised instead of recording a trial beyond the budget.
        """
        with self._session(f"start trial {number} of study {study_name!r}") as session:
            if budget is not None:
                self._lock_budget(session, study_name)
            study = self._study_row(session, study_name)
            self._check_new_trial(session, study, number)
            if budget is not None:
                used = session.scalar(_budget_count(study.id))
                if used >= budget:
                    raise BudgetSpent(f"study {study_name!r} has used {used} of {budget} trials")
            row = TrialModel(
                study_id=study.id,
                number=number,
                state="running",
                params=params,
                launch_plan=launch_plan,
                gpus=gpus,
                hardware=hardware,
                log_path=log_path,
                worker_host=worker_host,
                worker_pid=worker_pid,
                started_at=_now(),
            )
            session.add(row)
            session.flush()
            return row.id

    def budget_used(self, study_name: str) -> int:
        """Trials that count toward the budget: running, complete, or failed for a reason of
        their own (an interrupted trial does not count; the study runs another in its place)."""
        with self._session(f"count the trials of study {study_name!r}") as session:
            study = self._study_row(session, study_name)
            return session.scalar(_budget_count(study.id))

    def interrupt_trial(self, trial_id: int, *, reason: str, log_tail: str | None = None) -> bool:
        """Mark a running trial failed (interrupted) if it still is running; False if another
        worker got there first. For trials whose own worker died and cannot finish them."""
        with self._session(f"mark trial id {trial_id} interrupted") as session:
            result = session.execute(
                update(TrialModel)
                .where(TrialModel.id == trial_id, TrialModel.state == "running")
                .values(state="failed", failure_kind="interrupted", failure_reason=reason,
                        log_tail=log_tail, finished_at=_now())
            )
            return result.rowcount == 1

    def record_infeasible(self, study_name: str, number: int, params: dict, reason: str) -> int:
        """Record a trial rejected before launch: infeasible and finished at once."""
        now = _now()
        with self._session(f"record infeasible trial {number} of {study_name!r}") as session:
            study = self._study_row(session, study_name)
            self._check_new_trial(session, study, number)
            row = TrialModel(
                study_id=study.id,
                number=number,
                state="infeasible",
                params=params,
                failure_kind="infeasible",
                failure_reason=reason,
                started_at=now,
                finished_at=now,
            )
            session.add(row)
            session.flush()
            return row.id

    def finish_trial(
        self,
        trial_id: int,
        *,
        state: str,
        objective: float | None = None,
        meets_sla: bool | None = None,
        failure_kind: str | None = None,
        failure_reason: str | None = None,
        log_tail: str | None = None,
        engine_version: str | None = None,
        measurements: Sequence[LevelMeasurement] = (),
    ) -> None:
        """End a running trial: its state, finish time and every measurement in one transaction.

        Either all of it is stored or none of it (the trial then stays 'running').
        """
        _check_finished_state(state)
        with self._session(f"finish trial id {trial_id}") as session:
            row = self._trial_row(session, trial_id)
            if row.state != "running":
                raise StoreError(
                    f"trial {row.number} of study {row.study.name!r} is already {row.state}: "
                    "a finished trial is never finished again"
                )
            row.state = state
            row.finished_at = _now()
            row.objective = objective
            row.meets_sla = meets_sla
            row.failure_kind = failure_kind
            row.failure_reason = failure_reason
            row.log_tail = log_tail
            row.engine_version = engine_version
            session.add_all(_measurement_rows(row.id, 0, measurements))

    def record_confirmation(
        self,
        study_name: str,
        number: int,
        *,
        state: str,
        objective: float | None,
        meets_sla: bool | None,
        reason: str | None,
        measurements: Sequence[LevelMeasurement] = (),
    ) -> None:
        """Store a finished trial's re-run in a fresh server, replacing an earlier one, with its
        verdict (confirmed | differs | failed) in one transaction."""
        if state not in CONFIRM_STATES:
            raise ValueError(f"confirmation state must be one of {CONFIRM_STATES}, not {state!r}")
        with self._session(f"confirm trial {number} of study {study_name!r}") as session:
            study = self._study_row(session, study_name)
            row = TrialModel.find(study.id, number, session)
            if row is None or row.state != "complete":
                raise StoreError(f"trial {number} of study {study_name!r} is not a complete "
                                 "trial: only complete trials are confirmed")
            for m in [m for m in row.measurements if m.run == 1]:
                session.delete(m)
            session.flush()
            row.confirm_state = state
            row.confirm_objective = objective
            row.confirm_meets_sla = meets_sla
            row.confirm_reason = reason
            row.confirmed_at = _now()
            session.add_all(_measurement_rows(row.id, 1, measurements))

    def trials(self, study_name: str) -> list[TrialRecord]:
        """Every trial of the study by number (none for an unknown study)."""
        with self._session(f"read trials of study {study_name!r}") as session:
            rows = session.scalars(_trials_query(study_name))
            return [_trial_record(row, study_name) for row in rows]

    def trial(self, study_name: str, number: int) -> TrialRecord | None:
        with self._session(f"read trial {number} of study {study_name!r}") as session:
            query = _trials_query(study_name).where(TrialModel.number == number)
            row = session.scalars(query).one_or_none()
            return None if row is None else _trial_record(row, study_name)

    def running_trials(self, study_name: str) -> list[TrialRecord]:
        with self._session(f"read running trials of study {study_name!r}") as session:
            rows = session.scalars(_trials_query(study_name).where(TrialModel.state == "running"))
            return [_trial_record(row, study_name) for row in rows]

    # -- servers ------------------------------------------------------------------------------

    def record_server(
        self, trial_id: int, *, host: str, pid: int, pgid: int, create_time: float, log_path: str
    ) -> None:
        """Record a launched server, so a later run can reap it if this tuner dies."""
        with self._session(f"record the server of trial id {trial_id}") as session:
            self._trial_row(session, trial_id)
            session.add(
                ServerModel(
                    trial_id=trial_id,
                    host=host,
                    pid=pid,
                    pgid=pgid,
                    create_time=create_time,
                    log_path=log_path,
                    started_at=_now(),
                )
            )

    def mark_server_stopped(self, trial_id: int) -> None:
        """Mark every still-running server of the trial stopped now (idempotent)."""
        with self._session(f"mark the server of trial id {trial_id} stopped") as session:
            session.execute(
                update(ServerModel)
                .where(ServerModel.trial_id == trial_id, ServerModel.stopped_at.is_(None))
                .values(stopped_at=_now())
            )

    def unstopped_servers(self, host: str) -> list[ServerRecord]:
        """Servers on `host` never marked stopped, oldest first."""
        with self._session(f"read the servers on {host}") as session:
            query = (
                select(ServerModel, TrialModel.worker_pid)
                .join(TrialModel, TrialModel.id == ServerModel.trial_id)
                .where(ServerModel.host == host, ServerModel.stopped_at.is_(None))
                .order_by(ServerModel.started_at, ServerModel.id)
            )
            return [replace(_server_record(row), worker_pid=pid)
                    for row, pid in session.execute(query)]

    # -- predictions --------------------------------------------------------------------------

    def save_predictions(
        self,
        study_name: str,
        rows: Sequence[dict[str, Any]],
        *,
        source: str,
        engine: str,
        gpu_type: str,
        calibration: str,
        replace_all: bool = False,
    ) -> int:
        """Store predictions of `source` (e.g. "perfmodel") for a study, in one transaction.

        Each row holds config_key, params, concurrency, fits, output_tok_s_per_gpu,
        tok_s_per_user, ttft_ms, meets_sla and reason. The rows of a configuration replace every
        stored prediction of that configuration (all its levels); with replace_all, every stored
        prediction of this study, source, engine and GPU type is replaced. The study need not
        exist yet. Returns the number of rows stored.
        """
        now = _now()
        values = [
            {**{k: r[k] for k in _PREDICTION_ROW}, "study_name": study_name, "source": source,
             "engine": engine, "gpu_type": gpu_type, "calibration": calibration,
             "created_at": now}
            for r in rows
        ]
        scope = (
            PredictionModel.study_name == study_name,
            PredictionModel.source == source,
            PredictionModel.engine == engine,
            PredictionModel.gpu_type == gpu_type,
        )
        with self._session(f"store predictions of {study_name!r}") as session:
            if replace_all:
                session.execute(delete(PredictionModel).where(*scope))
            else:
                keys = sorted({v["config_key"] for v in values})
                for i in range(0, len(keys), 500):
                    session.execute(delete(PredictionModel).where(
                        *scope, PredictionModel.config_key.in_(keys[i : i + 500])))
            if values:
                session.execute(insert(PredictionModel), values)
        return len(values)

    def predictions(self, study_name: str, *, source: str | None = None) -> list[PredictionRecord]:
        """A study's stored predictions (of one source, or all), by configuration and level."""
        query = select(PredictionModel).where(PredictionModel.study_name == study_name)
        if source is not None:
            query = query.where(PredictionModel.source == source)
        query = query.order_by(PredictionModel.id)
        with self._session(f"read predictions of {study_name!r}") as session:
            return [_prediction_record(row) for row in session.scalars(query)]

    # -- internals ----------------------------------------------------------------------------

    @contextmanager
    def _session(self, action: str) -> Iterator[Session]:
        """One unit of work: committed on success, rolled back on any error, always closed."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as e:
            session.rollback()
            raise StoreError(f"cannot {action} in {self._where}: {_cause(e)}{_hint(e)}") from e
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @staticmethod
    def _lock_budget(session: Session, study_name: str) -> None:
        """Hold the study's claim lock until the session's transaction ends."""
        if session.get_bind().dialect.name == "postgresql":
            key = zlib.crc32(study_name.encode()) - 2**31  # pg's int4
            session.execute(select(func.pg_advisory_xact_lock(_PG_BUDGET_LOCK, key)))
        else:
            # SQLite: a write as the transaction's first statement takes the database's write
            # lock (waiting for another writer's), so the count below cannot go stale.
            session.execute(update(StudyModel).where(StudyModel.name == study_name)
                            .values(name=StudyModel.name))

    def _study_row(self, session: Session, name: str) -> StudyModel:
        row = StudyModel.find_by_name(name, session)
        if row is None:
            raise StoreError(f"no study named {name!r} in {self._where}: create it first")
        return row

    def _trial_row(self, session: Session, trial_id: int) -> TrialModel:
        row = session.get(TrialModel, trial_id)
        if row is None:
            raise StoreError(f"no trial with id {trial_id} in {self._where}: start it first")
        return row

    @staticmethod
    def _check_new_trial(session: Session, study: StudyModel, number: int) -> None:
        if TrialModel.find(study.id, number, session) is not None:
            raise StoreError(
                f"trial {number} of study {study.name!r} is already recorded: "
                "record each Optuna trial number once"
            )


# -- opening ----------------------------------------------------------------------------------


def _parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as e:
        raise StoreError(
            f"cannot parse storage URL {url if '@' not in url else '<with credentials>'!r}: "
            "pass e.g. sqlite:///tuner.db or "
            "postgresql://user@host/db"
        ) from e


def sqlite_file(url: str) -> Path | None:
    """The database file of an SQLite storage URL; None for other backends, memory, URI
    filenames and URLs that do not parse."""
    try:
        return _sqlite_file(_parse_url(url))
    except StoreError:
        return None


def _sqlite_file(url: URL) -> Path | None:
    """The database file of an SQLite URL; None for other backends, memory and URI filenames."""
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    if str(url.query.get("uri", "")).lower() in ("true", "1"):
        return None
    return Path(database)


def _check_sqlite_path(path: Path, *, create: bool) -> None:
    """Refuse what is not an SQLite database (or a new file we may create), only by looking."""
    if not path.exists():
        if not create:
            raise _no_database(str(path))
        if not path.parent.is_dir():
            raise StoreError(
                f"cannot create {path}: directory {path.parent} does not exist: "
                "create it or choose another --storage"
            )
        return
    if path.is_dir():
        raise StoreError(
            f"{path} is a directory, not a database file: pass a file path such as "
            f"--storage sqlite:///{path / 'tuner.db'}"
        )
    if not path.is_file():
        raise StoreError(f"{path} is not a regular file: choose another --storage")
    if not os.access(path, os.R_OK):
        raise StoreError(
            f"cannot read {path}: permission denied: "
            "fix its permissions or choose another --storage"
        )
    try:
        with path.open("rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}: choose another --storage") from e
    # An empty file is a valid, empty SQLite database.
    if header and header != _SQLITE_HEADER:
        raise StoreError(f"{path} is not an SQLite database: choose another --storage")


def _no_database(where: str) -> StoreError:
    return StoreError(f"no study database at {where}: run `tuner run` first or pass --storage")


def _create_engine(url: URL, where: str) -> Engine:
    try:
        if url.get_backend_name() == "sqlite":
            engine = create_engine(url, connect_args={"timeout": _SQLITE_TIMEOUT_S})
            event.listen(engine, "connect", _sqlite_foreign_keys_on)
            return engine
        # Long studies outlive idle server connections: test each before use.
        return create_engine(url, pool_pre_ping=True)
    except ArgumentError as e:
        raise StoreError(f"cannot use {where}: {e}: pass a sqlite:// or postgresql:// URL") from e
    except ImportError as e:
        raise StoreError(f"cannot use {where}: {e}: install the database driver") from e


def _sqlite_foreign_keys_on(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _check_contents(engine: Engine, where: str, *, sqlite_file: bool, create: bool) -> set[str]:
    """Read-only checks: no foreign tables (SQLite), tuner's tables if required, a known schema.

    Returns the database's tuner schema revisions (none for a database without tuner's tables).
    """
    with engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        if sqlite_file:
            foreign = sorted(t for t in tables if not _is_ours(t))
            if foreign:
                raise StoreError(
                    f"{where} is not a tuner database (it has tables {_some(foreign)}): "
                    "choose another --storage"
                )
        if VERSION_TABLE not in tables:
            if not create:
                raise _no_database(where)
            return set()
        heads = set(_migration_context(connection).get_current_heads())
    unknown = sorted(heads - _known_revisions())
    if unknown:
        raise StoreError(
            f"{where} was created by a newer tuner (schema revision {unknown[0]}): "
            "upgrade tuner or choose another --storage"
        )
    return heads


def _is_ours(table: str) -> bool:
    """tuner's own tables, or Optuna's, which share the database by design."""
    return table.startswith(TABLE_PREFIX) or table in _optuna_tables()


@functools.cache
def _optuna_tables() -> frozenset[str]:
    return frozenset(optuna_models.BaseModel.metadata.tables) | {"alembic_version"}


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _use_wal(engine: Engine) -> None:
    # Persistent in the file: readers (the dashboard) no longer block the writer, nor it them.
    with engine.connect() as connection:
        if connection.exec_driver_sql("PRAGMA journal_mode").scalar() != "wal":
            connection.exec_driver_sql("PRAGMA journal_mode=WAL")


def _upgrade(engine: Engine, url: URL) -> None:
    """`alembic upgrade head` in one transaction that holds the write lock, so workers opening a
    fresh database at the same time migrate it once (Alembic re-reads the revision under it)."""
    if url.get_backend_name() == "sqlite":
        migration_engine = _sqlite_migration_engine(url)
        try:
            with migration_engine.begin() as connection:
                command.upgrade(_alembic_config(connection), "head")
        finally:
            migration_engine.dispose()
        return
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
        command.upgrade(_alembic_config(connection), "head")


def _sqlite_migration_engine(url: URL) -> Engine:
    """An engine whose transactions start with BEGIN IMMEDIATE and include DDL.

    Python's sqlite3 emits no BEGIN before DDL, so a migration would otherwise commit statement
    by statement and two processes could both try to create the tables.
    """
    engine = create_engine(url, connect_args={"timeout": _SQLITE_TIMEOUT_S}, poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _driver_leaves_transactions_to_us(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def _migration_context(connection: Connection) -> MigrationContext:
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_alembic_config())


def _known_revisions() -> frozenset[str]:
    return frozenset(rev.revision for rev in _scripts().walk_revisions())


def _head_revision() -> str | None:
    return _scripts().get_current_head()


# -- rows to records --------------------------------------------------------------------------

_MEASUREMENT_FIELDS = tuple(f.name for f in fields(LevelMeasurement))
CONFIRM_STATES = ("confirmed", "differs", "failed")


def _measurement_rows(trial_id: int, run: int,
                      measurements: Sequence[LevelMeasurement]) -> list[MeasurementModel]:
    # A level's position in the sweep is its key: open-loop levels share one concurrency cap.
    return [MeasurementModel(trial_id=trial_id, run=run, level=i, **m.to_dict())
            for i, m in enumerate(measurements)]


def _budget_count(study_id: int) -> Select:
    # counts_toward_budget in SQL, plus the running trials' claims.
    finished = [s for s in BUDGET_STATES if s != "failed"]
    counts = or_(TrialModel.state.in_(("running", *finished)),
                 and_(TrialModel.state == "failed",
                      func.coalesce(TrialModel.failure_kind, "").not_in(NOT_COUNTED_FAILURES)))
    return select(func.count()).select_from(TrialModel).where(TrialModel.study_id == study_id,
                                                              counts)


def _trials_query(study_name: str) -> Select:
    return (
        select(TrialModel)
        .join(TrialModel.study)
        .where(StudyModel.name == study_name)
        .order_by(TrialModel.number)
        .options(selectinload(TrialModel.measurements))
    )


def _study_record(row: StudyModel) -> StudyRecord:
    return StudyRecord(
        id=row.id,
        name=row.name,
        engine=row.engine,
        model=row.model,
        gpu_type=row.gpu_type,
        spec=row.spec,
        space=row.space,
        tuner_version=row.tuner_version,
        created_at=row.created_at,
    )


def _trial_record(row: TrialModel, study_name: str) -> TrialRecord:
    return TrialRecord(
        id=row.id,
        study_name=study_name,
        number=row.number,
        state=row.state,
        params=row.params,
        launch_plan=row.launch_plan,
        objective=row.objective,
        meets_sla=row.meets_sla,
        failure_kind=row.failure_kind,
        failure_reason=row.failure_reason,
        log_tail=row.log_tail,
        log_path=row.log_path,
        engine_version=row.engine_version,
        gpus=row.gpus,
        hardware=row.hardware,
        worker_host=row.worker_host,
        worker_pid=row.worker_pid,
        started_at=row.started_at,
        finished_at=row.finished_at,
        measurements=[_measurement(m) for m in row.measurements if m.run == 0],
        confirm_state=row.confirm_state,
        confirm_objective=row.confirm_objective,
        confirm_meets_sla=row.confirm_meets_sla,
        confirm_reason=row.confirm_reason,
        confirmed_at=row.confirmed_at,
        confirmation=[_measurement(m) for m in row.measurements if m.run == 1],
    )


def _measurement(row: MeasurementModel) -> LevelMeasurement:
    return LevelMeasurement(**{name: getattr(row, name) for name in _MEASUREMENT_FIELDS})


_PREDICTION_ROW = ("config_key", "params", "concurrency", "fits", "output_tok_s_per_gpu",
                   "tok_s_per_user", "ttft_ms", "meets_sla", "reason")


def _prediction_record(row: PredictionModel) -> PredictionRecord:
    return PredictionRecord(**{f.name: getattr(row, f.name) for f in fields(PredictionRecord)})


def _server_record(row: ServerModel) -> ServerRecord:
    return ServerRecord(
        trial_id=row.trial_id,
        host=row.host,
        pid=row.pid,
        pgid=row.pgid,
        create_time=row.create_time,
        log_path=row.log_path,
        started_at=row.started_at,
    )


# -- small helpers ----------------------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _check_finished_state(state: str) -> None:
    if state in _FINISHED_STATES:
        return
    expected = ", ".join(_FINISHED_STATES)
    if state in TRIAL_STATES:
        raise ValueError(f"a trial cannot finish as {state!r}: expected one of {expected}")
    raise ValueError(f"unknown trial state {state!r}: expected one of {expected}")


def _cause(e: BaseException) -> str:
    """The driver's own message when there is one (SQLAlchemy's adds the SQL and a link)."""
    orig = getattr(e, "orig", None)
    text = " ".join(str(orig if orig is not None else e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _hint(e: SQLAlchemyError) -> str:
    if isinstance(e, IntegrityError):
        return ": a record with the same key exists, or one it refers to is missing"
    if isinstance(e, OperationalError):
        return ": check the database is reachable, writable and not locked by another process"
    return ""


def mask_url(url: str) -> str:
    """A storage URL with any password replaced by ***, for printing and logging."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is reported elsewhere; never print it raw
        return "<storage url>"
