"""Rows to records and records to rows, and the queries the repository builds on.

The one module that knows both the database's models and the plain records; the budget rule's
SQL form (`_budget_count`) sits here with the other queries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import fields

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import Session

from db.models import (
    TRIAL_STATES,
    MeasurementModel,
    PredictionModel,
    QualityCheckModel,
    ServerModel,
    StudyModel,
    TrialModel,
)
from tuner.store.records import (
    BUDGET_STATES,
    NOT_COUNTED_FAILURES,
    HeadToHead,
    LevelMeasurement,
    PredictionRecord,
    QualityCheck,
    ServerRecord,
    StudyRecord,
    TrialRecord,
)

_FINISHED_STATES = tuple(s for s in TRIAL_STATES if s != "running")


# -- rows to records --------------------------------------------------------------------------

_MEASUREMENT_FIELDS = tuple(f.name for f in fields(LevelMeasurement))


def _measurement_rows(trial_id: int, run: int,
                      measurements: Sequence[LevelMeasurement]) -> list[MeasurementModel]:
    # A level's position in the sweep is its key: open-loop levels share one concurrency cap.
    return [MeasurementModel(trial_id=trial_id, run=run, level=i, **m.to_dict())
            for i, m in enumerate(measurements)]


def _counts_or_runs():
    """counts_toward_budget in SQL, plus the running trials' claims."""
    finished = [s for s in BUDGET_STATES if s != "failed"]
    return or_(TrialModel.state.in_(("running", *finished)),
               and_(TrialModel.state == "failed",
                    func.coalesce(TrialModel.failure_kind, "").not_in(NOT_COUNTED_FAILURES)))


def _budget_count(study_id: int) -> Select:
    return select(func.count()).select_from(TrialModel).where(TrialModel.study_id == study_id,
                                                              _counts_or_runs())


# The trial record's fields that are the trial row's own columns (the rest: study name, levels,
# confirmation levels, quality check).
_TRIAL_COLUMNS = tuple(f.name for f in fields(TrialRecord)
                       if f.name not in ("study_name", "measurements", "confirmation", "quality"))


def _trial_records(session: Session, study_name: str, *where) -> list[TrialRecord]:
    """The study's trials (those matching `where`) as records, by number. Three plain queries
    (the trials, their levels, their quality checks) read as tuples: building an ORM object per
    row was most of the time of a 5,000-trial study's read (the dashboard reads every trial)."""
    ids = (select(TrialModel.id).join(TrialModel.study)
           .where(StudyModel.name == study_name, *where))
    trial_rows = session.execute(
        select(*(getattr(TrialModel, name) for name in _TRIAL_COLUMNS))
        .where(TrialModel.id.in_(ids)).order_by(TrialModel.number)).all()
    levels: dict[tuple[int, int], list[LevelMeasurement]] = {}
    for row in session.execute(
            select(MeasurementModel.trial_id, MeasurementModel.run,
                   *(getattr(MeasurementModel, name) for name in _MEASUREMENT_FIELDS))
            .where(MeasurementModel.trial_id.in_(ids))
            .order_by(MeasurementModel.trial_id, MeasurementModel.run, MeasurementModel.level)):
        levels.setdefault((row[0], row[1]), []).append(
            LevelMeasurement(**dict(zip(_MEASUREMENT_FIELDS, row[2:], strict=True))))
    checks: dict[int, QualityCheck] = {}
    for row in session.execute(
            select(QualityCheckModel.trial_id,
                   *(getattr(QualityCheckModel, name) for name in _QUALITY_FIELDS))
            .where(QualityCheckModel.trial_id.in_(ids), QualityCheckModel.run == 0)):
        checks[row[0]] = QualityCheck(**dict(zip(_QUALITY_FIELDS, row[1:], strict=True)))
    records = []
    for row in trial_rows:
        values = dict(zip(_TRIAL_COLUMNS, row, strict=True))
        values["skipped_levels"] = list(values["skipped_levels"] or [])
        records.append(TrialRecord(study_name=study_name, **values,
                                   measurements=levels.get((row.id, 0), []),
                                   confirmation=levels.get((row.id, 1), []),
                                   quality=checks.get(row.id)))
    return records


def _study_record(row: StudyModel) -> StudyRecord:
    latest = row.head_to_heads[-1] if row.head_to_heads else None
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
        head_to_head=None if latest is None else HeadToHead(
            leader=latest.leader, pick=latest.pick, reason=latest.reason,
            together=latest.together, ratios=list(latest.ratios), rounds=list(latest.rounds),
            created_at=latest.created_at),
    )


_QUALITY_FIELDS = tuple(f.name for f in fields(QualityCheck))


def _quality_check_row(trial_id: int, run: int, check: QualityCheck) -> QualityCheckModel:
    return QualityCheckModel(trial_id=trial_id, run=run,
                             **{name: getattr(check, name) for name in _QUALITY_FIELDS})


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
        owner_pid=row.owner_pid,
        owner_create_time=row.owner_create_time,
        start_phases=row.start_phases,
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
