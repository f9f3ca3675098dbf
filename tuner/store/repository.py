"""The study database: tuner's records, kept beside Optuna's tables in the same database.

This is the only storage API the rest of tuner uses: the `Store`, its studies, trials,
measurements (here), servers (`servers`) and predictions (`predictions`), on `session`'s unit of
work. Opening and checking a database is `bootstrap`'s; turning rows into records is `rows`'.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.models import StudyModel, TrialModel
from tuner.store import bootstrap
from tuner.store.bootstrap import _PG_BUDGET_LOCK
from tuner.store.errors import BudgetSpent, ConfigurationTaken, StoreError
from tuner.store.head_to_head import HeadToHeadRows
from tuner.store.predictions import Predictions
from tuner.store.quality import QualityRows
from tuner.store.records import (
    CONFIRM_STATES,
    LevelMeasurement,
    QualityCheck,
    StudyRecord,
    TrialRecord,
    config_key,
    settles_configuration,
)
from tuner.store.rows import (
    _budget_count,
    _check_finished_state,
    _counts_or_runs,
    _measurement_rows,
    _now,
    _quality_check_row,
    _study_record,
    _trial_records,
)
from tuner.store.servers import ServerRows

__all__ = ["Store"]


class Store(ServerRows, Predictions, QualityRows, HeadToHeadRows):
    """tuner's records in one database. Open it with `Store.open(url)`; close it when done."""

    @classmethod
    def open(cls, url: str, *, create: bool = True, upgrade: bool | None = None) -> Store:
        """Check the database, then bring tuner's tables up to date where allowed.

        `create` lets a missing database be created; `upgrade` (by default: `create`) lets an
        older schema be migrated. `Store.open(url, create=False)` is a reader's: it never creates,
        migrates or otherwise writes, and refuses an older schema in one line naming
        `tuner upgrade`. Nothing is written before every check has passed.
        """
        engine, where = bootstrap.open_engine(
            url, create=create, upgrade=create if upgrade is None else upgrade)
        return cls(engine, url, where)

    @property
    def url(self) -> str:
        """The URL as given, password included: for connecting, never for showing."""
        return self._url

    @property
    def where(self) -> str:
        """Where the database is, for showing: the file path, or the URL without its password."""
        return self._where

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
        with bootstrap.setup_lock(self._engine, self._where):
            yield

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
        BudgetSpent is raised instead of recording a trial beyond the budget; under the same
        lock, ConfigurationTaken is raised for a configuration (`config_key`) that another trial
        of the study is running or has done (one interrupted may run again).
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
                holder = self._holder(session, study.id, config_key(params))
                if holder is not None:
                    raise ConfigurationTaken(f"trial {holder} of study {study_name!r} runs or "
                                             "ran this configuration")
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
        skipped_levels: Sequence[dict[str, Any]] = (),
        load_at_sla: float | None = None,
        load_search: str | None = None,
        quality: QualityCheck | None = None,
    ) -> None:
        """End a running trial: its state, finish time and every measurement (a load search's
        trial: its highest load that met the SLA, and why it ended; its quality check) in one
        transaction, all of it or none of it (the trial then stays 'running')."""
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
            row.skipped_levels = list(skipped_levels) or None
            row.load_at_sla = load_at_sla
            row.load_search = load_search
            session.add_all(_measurement_rows(row.id, 0, measurements))
            if quality is not None:
                session.add(_quality_check_row(row.id, 0, quality))

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
        verdict (confirmed | inconclusive | differs | failed) in one transaction."""
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
            return _trial_records(session, study_name)

    def trial(self, study_name: str, number: int) -> TrialRecord | None:
        with self._session(f"read trial {number} of study {study_name!r}") as session:
            found = _trial_records(session, study_name, TrialModel.number == number)
            return found[0] if found else None

    def running_trials(self, study_name: str) -> list[TrialRecord]:
        with self._session(f"read running trials of study {study_name!r}") as session:
            return _trial_records(session, study_name, TrialModel.state == "running")

    # -- internals ----------------------------------------------------------------------------

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

    @staticmethod
    def _holder(session: Session, study_id: int, key: str) -> int | None:
        """The number of a trial of the study whose configuration this is and that settles it
        (running, or counting toward the budget: `settles_configuration`), if any; read under
        the claim lock."""
        rows = session.execute(
            select(TrialModel.number, TrialModel.params, TrialModel.state,
                   TrialModel.failure_kind)
            .where(TrialModel.study_id == study_id, _counts_or_runs())
            .order_by(TrialModel.number)).all()
        same = [row for row in rows if config_key(row.params) == key]
        if settles_configuration([(row.state, row.failure_kind) for row in same]):
            return same[-1].number
        return None

    @staticmethod
    def _check_new_trial(session: Session, study: StudyModel, number: int) -> None:
        if TrialModel.find(study.id, number, session) is not None:
            raise StoreError(
                f"trial {number} of study {study.name!r} is already recorded: "
                "record each Optuna trial number once"
            )
