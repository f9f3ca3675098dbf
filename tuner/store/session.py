"""What every part of the `Store` stands on: its engine, where it is (for messages), and one unit
of work per call, whose database errors become `StoreError`s naming the action."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db.models import StudyModel, TrialModel
from tuner.store.bootstrap import _cause, _hint
from tuner.store.errors import StoreError


class StoreBase:
    """The connection and the session rule the `Store`'s parts share."""

    def __init__(self, engine: Engine, url: str, where: str) -> None:
        self._engine = engine
        self._url = url
        self._where = where  # the file path or the URL without its password, for messages
        self._sessions = sessionmaker(bind=engine, expire_on_commit=False)

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
