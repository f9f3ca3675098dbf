"""The `Store`'s head-to-head rows: a study's finalists measured side by side, the latest of
which names the study's pick (`StudyRecord.head_to_head`)."""

from __future__ import annotations

from db.models import HeadToHeadModel
from tuner.store.records import HeadToHead
from tuner.store.rows import _now
from tuner.store.session import StoreBase


class HeadToHeadRows(StoreBase):
    def record_head_to_head(self, study_name: str, h: HeadToHead) -> None:
        """Store a head-to-head of the study's finalists; the latest one counts."""
        with self._session(f"store the head-to-head of study {study_name!r}") as session:
            study = self._study_row(session, study_name)
            session.add(HeadToHeadModel(
                study_id=study.id, created_at=_now(), leader=h.leader, pick=h.pick,
                reason=h.reason, together=h.together, ratios=h.ratios, rounds=h.rounds))
