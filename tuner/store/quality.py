"""The `Store`'s quality gate rows: a study's reference answers (one row per study, claimed by
the worker that computes them) and each trial's answers against them."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from db.models import QualityReferenceModel, StudyModel
from tuner.store.errors import StoreError
from tuner.store.records import QualityReference
from tuner.store.rows import _now
from tuner.store.session import StoreBase


def _reference(row: QualityReferenceModel, study_name: str) -> QualityReference:
    return QualityReference(
        study_name=study_name, state=row.state, params=row.params, settings=row.settings,
        claimed_by=row.claimed_by, claimed_at=row.claimed_at, answers=list(row.answers or []),
        computed_at=row.computed_at, answer_s=row.answer_s, engine_version=row.engine_version)


class QualityRows(StoreBase):
    """Reference answers per study, claimed once: the unique row on the study is the lock."""

    def reference(self, study_name: str) -> QualityReference | None:
        """The study's reference answers, ready or being computed; None before any claim."""
        with self._session(f"read the quality reference of {study_name!r}") as session:
            study = self._study_row(session, study_name)
            row = session.scalars(select(QualityReferenceModel).where(
                QualityReferenceModel.study_id == study.id)).one_or_none()
            return None if row is None else _reference(row, study_name)

    def claim_reference(self, study_name: str, *, claimant: str, params: dict[str, Any],
                        settings: dict[str, Any], take_over: str | None = None) -> bool:
        """Claim the computing of the study's reference answers for `claimant`: True when this
        call inserted the study's row (or, with `take_over`, replaced the claim of that
        abandoned claimant, still computing); False when another worker holds or finished it."""
        try:
            with self._session(f"claim the quality reference of {study_name!r}") as session:
                study = self._study_row(session, study_name)
                if take_over is not None:
                    taken = session.execute(
                        update(QualityReferenceModel)
                        .where(QualityReferenceModel.study_id == study.id,
                               QualityReferenceModel.claimed_by == take_over,
                               QualityReferenceModel.state == "computing")
                        .values(claimed_by=claimant, claimed_at=_now(), params=params,
                                settings=settings))
                    return taken.rowcount == 1
                session.add(QualityReferenceModel(
                    study_id=study.id, state="computing", params=params, settings=settings,
                    claimed_by=claimant, claimed_at=_now()))
                session.flush()
                return True
        except StoreError as e:
            if isinstance(e.__cause__, IntegrityError):  # another worker's row came first
                return False
            raise

    def save_reference(self, study_name: str, *, claimant: str, answers: list[dict[str, Any]],
                       answer_s: float, engine_version: str | None) -> None:
        """Store the answers `claimant` computed: the study's reference from now on. Raises
        StoreError when its claim was taken over meanwhile (the other worker's answers win)."""
        with self._session(f"store the quality reference of {study_name!r}") as session:
            study = self._study_row(session, study_name)
            saved = session.execute(
                update(QualityReferenceModel)
                .where(QualityReferenceModel.study_id == study.id,
                       QualityReferenceModel.claimed_by == claimant,
                       QualityReferenceModel.state == "computing")
                .values(state="ready", answers=answers, answer_s=answer_s,
                        engine_version=engine_version, computed_at=_now()))
            if saved.rowcount != 1:
                raise StoreError(f"the quality reference of study {study_name!r} was taken over "
                                 "by another worker while this one computed it")

    def release_reference(self, study_name: str, *, claimant: str) -> None:
        """Give up `claimant`'s claim (its reference failed), so another run can claim it."""
        with self._session(f"release the quality reference of {study_name!r}") as session:
            study = StudyModel.find_by_name(study_name, session)
            if study is None:
                return
            session.execute(delete(QualityReferenceModel).where(
                QualityReferenceModel.study_id == study.id,
                QualityReferenceModel.claimed_by == claimant,
                QualityReferenceModel.state == "computing"))


def claim_age_s(reference: QualityReference) -> float:
    """Seconds since the reference was claimed."""
    return (dt.datetime.now(dt.timezone.utc) - reference.claimed_at).total_seconds()
