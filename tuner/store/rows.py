"""Rows to records and records to rows, and the queries the repository builds on.

The one module that knows both the database's models and the plain records; the budget rule's
SQL form (`_budget_count`) sits here with the other queries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import fields

from sqlalchemy import Select, and_, func, or_, select
from sqlalchemy.orm import selectinload

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


def _trials_query(study_name: str) -> Select:
    return (
        select(TrialModel)
        .join(TrialModel.study)
        .where(StudyModel.name == study_name)
        .order_by(TrialModel.number)
        .options(selectinload(TrialModel.measurements),
                 selectinload(TrialModel.quality_checks))
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
        skipped_levels=list(row.skipped_levels or []),
        load_at_sla=row.load_at_sla,
        load_search=row.load_search,
        quality=next((_quality_check(q) for q in row.quality_checks if q.run == 0), None),
    )


_QUALITY_FIELDS = tuple(f.name for f in fields(QualityCheck))


def _quality_check_row(trial_id: int, run: int, check: QualityCheck) -> QualityCheckModel:
    return QualityCheckModel(trial_id=trial_id, run=run,
                             **{name: getattr(check, name) for name in _QUALITY_FIELDS})


def _quality_check(row: QualityCheckModel) -> QualityCheck:
    return QualityCheck(**{name: getattr(row, name) for name in _QUALITY_FIELDS})


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
        owner_pid=row.owner_pid,
        owner_create_time=row.owner_create_time,
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
