"""tuner's own tables, kept beside Optuna's in the same database.

Every table name starts with `tuner_` so it never collides with Optuna's (`studies`, `trials`, ...),
and the Alembic version table is `tuner_alembic_version` because Optuna's migrations already own
`alembic_version`. This module stores and returns rows; it knows nothing of engines or launchers.
Any change here needs a new migration in `db/migrations/versions/`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

VERSION_TABLE = "tuner_alembic_version"
TABLE_PREFIX = "tuner_"
# Optuna's tables, which share the study database by design (its RDB storage's schema; a test
# compares this list with the installed Optuna's, so an upgrade that changes it is seen).
OPTUNA_TABLES = frozenset({
    "alembic_version", "studies", "study_directions", "study_system_attributes",
    "study_user_attributes", "trial_heartbeats", "trial_intermediate_values", "trial_params",
    "trial_system_attributes", "trial_user_attributes", "trial_values", "trials",
    "version_info"})
TRIAL_STATES = ("running", "complete", "failed", "infeasible", "pruned")

# As Optuna: MySQL cannot index longer VARCHARs; unindexed free text is Text.
MAX_INDEXED_STRING_LENGTH = 512

# Named constraints, so later migrations (SQLite batch mode included) can address them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[dt.datetime]):
    """A timezone-aware UTC datetime on every backend.

    SQLite keeps no zone, so values are stored as UTC and read back with the UTC zone attached.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: tuner stores timezone-aware UTC times")
        return value.astimezone(dt.timezone.utc)

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class StudyModel(Base):
    __tablename__ = "tuner_studies"
    __table_args__ = (UniqueConstraint("name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(MAX_INDEXED_STRING_LENGTH), nullable=False)
    engine: Mapped[str] = mapped_column(String(64), nullable=False)
    model: Mapped[str] = mapped_column(Text, nullable=False)
    gpu_type: Mapped[str] = mapped_column(String(64), nullable=False)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    space: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    tuner_version: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)

    trials: Mapped[list[TrialModel]] = relationship(
        back_populates="study", cascade="all, delete-orphan", passive_deletes=True
    )
    head_to_heads: Mapped[list[HeadToHeadModel]] = relationship(
        cascade="all, delete-orphan", passive_deletes=True, order_by="HeadToHeadModel.id"
    )

    @classmethod
    def find_by_name(cls, name: str, session: Session) -> StudyModel | None:
        return session.scalars(select(cls).where(cls.name == name)).one_or_none()


class TrialModel(Base):
    __tablename__ = "tuner_trials"
    __table_args__ = (
        UniqueConstraint("study_id", "number"),
        CheckConstraint(
            "state IN (" + ", ".join(f"'{s}'" for s in TRIAL_STATES) + ")", name="state"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(
        ForeignKey("tuner_studies.id", ondelete="CASCADE"), nullable=False
    )
    number: Mapped[int] = mapped_column(Integer, nullable=False)  # Optuna's trial number
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    # none_as_null: Python None is SQL NULL here, not the JSON text 'null'.
    launch_plan: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    objective: Mapped[float | None] = mapped_column(Float)
    meets_sla: Mapped[bool | None] = mapped_column(Boolean)
    failure_kind: Mapped[str | None] = mapped_column(String(32))
    failure_reason: Mapped[str | None] = mapped_column(Text)
    log_tail: Mapped[str | None] = mapped_column(Text)
    log_path: Mapped[str | None] = mapped_column(Text)
    engine_version: Mapped[str | None] = mapped_column(String(256))
    gpus: Mapped[int | None] = mapped_column(Integer)
    hardware: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    # Levels the sweep did not measure, each with why: [{level, concurrency, request_rate, reason}]
    skipped_levels: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    # A load search's highest load that met the SLA, and why it ended there (None: fixed sweep).
    load_at_sla: Mapped[float | None] = mapped_column(Float)
    load_search: Mapped[str | None] = mapped_column(Text)
    worker_host: Mapped[str | None] = mapped_column(String(256))
    worker_pid: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # The re-run in a fresh server (`tuner confirm`): confirmed | inconclusive | differs |
    # failed, or None.
    confirm_state: Mapped[str | None] = mapped_column(String(16))
    confirm_objective: Mapped[float | None] = mapped_column(Float)
    confirm_meets_sla: Mapped[bool | None] = mapped_column(Boolean)
    confirm_reason: Mapped[str | None] = mapped_column(Text)
    confirmed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    study: Mapped[StudyModel] = relationship(back_populates="trials")
    measurements: Mapped[list[MeasurementModel]] = relationship(
        back_populates="trial",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="[MeasurementModel.run, MeasurementModel.level]",
    )
    servers: Mapped[list[ServerModel]] = relationship(
        back_populates="trial", cascade="all, delete-orphan", passive_deletes=True
    )
    quality_checks: Mapped[list[QualityCheckModel]] = relationship(
        back_populates="trial", cascade="all, delete-orphan", passive_deletes=True
    )

    @classmethod
    def find(cls, study_id: int, number: int, session: Session) -> TrialModel | None:
        query = select(cls).where(cls.study_id == study_id, cls.number == number)
        return session.scalars(query).one_or_none()


class MeasurementModel(Base):
    """One concurrency level of one trial: the columns are `tuner.records.LevelMeasurement`'s."""

    __tablename__ = "tuner_measurements"
    # `level`: position in the sweep (concurrency levels, or request rates in open-loop mode);
    # `run`: 0 for the trial's own sweep, 1 for its confirmation in a fresh server.
    __table_args__ = (UniqueConstraint("trial_id", "run", "level"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(
        ForeignKey("tuner_trials.id", ondelete="CASCADE"), nullable=False
    )
    concurrency: Mapped[int] = mapped_column(Integer, nullable=False)
    requests: Mapped[int] = mapped_column(Integer, nullable=False)
    errors: Mapped[int] = mapped_column(Integer, nullable=False)
    duration_s: Mapped[float] = mapped_column(Float, nullable=False)
    input_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    output_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    request_throughput: Mapped[float] = mapped_column(Float, nullable=False)
    output_tok_s: Mapped[float] = mapped_column(Float, nullable=False)
    output_tok_s_per_gpu: Mapped[float] = mapped_column(Float, nullable=False)
    ttft_p50_ms: Mapped[float | None] = mapped_column(Float)
    ttft_p90_ms: Mapped[float | None] = mapped_column(Float)
    ttft_p99_ms: Mapped[float | None] = mapped_column(Float)
    itl_p50_ms: Mapped[float | None] = mapped_column(Float)
    itl_p90_ms: Mapped[float | None] = mapped_column(Float)
    itl_p99_ms: Mapped[float | None] = mapped_column(Float)
    tpot_p50_ms: Mapped[float | None] = mapped_column(Float)
    tpot_p90_ms: Mapped[float | None] = mapped_column(Float)
    e2e_p50_ms: Mapped[float | None] = mapped_column(Float)
    e2e_p90_ms: Mapped[float | None] = mapped_column(Float)
    tok_s_per_user_p50: Mapped[float | None] = mapped_column(Float)
    tok_s_per_user_p90: Mapped[float | None] = mapped_column(Float)
    goodput_rps: Mapped[float] = mapped_column(Float, nullable=False)
    meets_sla: Mapped[bool] = mapped_column(Boolean, nullable=False)
    error_sample: Mapped[str | None] = mapped_column(Text)
    spec_drafts: Mapped[int | None] = mapped_column(Integer)
    spec_draft_tokens: Mapped[int | None] = mapped_column(Integer)
    spec_accepted_tokens: Mapped[int | None] = mapped_column(Integer)
    run: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    level: Mapped[int] = mapped_column(Integer, nullable=False)
    request_rate: Mapped[float | None] = mapped_column(Float)
    achieved_request_rate: Mapped[float | None] = mapped_column(Float)
    capped_requests: Mapped[int | None] = mapped_column(Integer)
    rounds: Mapped[int | None] = mapped_column(Integer)
    output_tok_s_ci95: Mapped[float | None] = mapped_column(Float)
    converged: Mapped[bool | None] = mapped_column(Boolean)
    ttft_mean_ms: Mapped[float | None] = mapped_column(Float)
    ttft_mean_ci95_ms: Mapped[float | None] = mapped_column(Float)
    itl_mean_ms: Mapped[float | None] = mapped_column(Float)
    itl_mean_ci95_ms: Mapped[float | None] = mapped_column(Float)
    kv_cache_usage_max: Mapped[float | None] = mapped_column(Float)
    requests_running_max: Mapped[float | None] = mapped_column(Float)
    requests_waiting_max: Mapped[float | None] = mapped_column(Float)
    preemptions: Mapped[int | None] = mapped_column(Integer)

    trial: Mapped[TrialModel] = relationship(back_populates="measurements")


class ServerModel(Base):
    """A launched server process, so a later run can find and reap one left by a killed tuner."""

    __tablename__ = "tuner_servers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(
        ForeignKey("tuner_trials.id", ondelete="CASCADE"), nullable=False
    )
    host: Mapped[str] = mapped_column(String(256), nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    pgid: Mapped[int] = mapped_column(Integer, nullable=False)
    # The process start time (psutil): tells the server apart from a later process reusing its pid.
    create_time: Mapped[float] = mapped_column(Float, nullable=False)
    log_path: Mapped[str] = mapped_column(Text, nullable=False)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    stopped_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # The tuner process that launched it (pid and start time): a confirmation's server is not
    # owned by its trial's worker. NULL in rows from before revision 0007.
    owner_pid: Mapped[int | None] = mapped_column(Integer)
    owner_create_time: Mapped[float | None] = mapped_column(Float)
    # Seconds per start phase, from its log: [[phase, seconds], ...] (NULL before 0011, or
    # where the server never became ready).
    start_phases: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))

    trial: Mapped[TrialModel] = relationship(back_populates="servers")


class QualityReferenceModel(Base):
    """A study's reference answers for the quality gate: one row per study, claimed by the
    worker that computes them (`state` computing) and then kept (`state` ready)."""

    __tablename__ = "tuner_quality_references"
    __table_args__ = (
        UniqueConstraint("study_id"),
        CheckConstraint("state IN ('computing', 'ready')", name="state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(
        ForeignKey("tuner_studies.id", ondelete="CASCADE"), nullable=False
    )
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # the configuration
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)  # the quality spec
    # [{prompt, text, tokens, logprobs, top_logprobs, error}], one per prompt; None while computing
    answers: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON(none_as_null=True))
    claimed_by: Mapped[str] = mapped_column(String(256), nullable=False)  # "host pid:start"
    claimed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    computed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    answer_s: Mapped[float | None] = mapped_column(Float)  # the answers' time, server start apart
    engine_version: Mapped[str | None] = mapped_column(String(256))


class QualityCheckModel(Base):
    """A trial's answers to the quality gate's prompts against its study's reference."""

    __tablename__ = "tuner_quality_checks"
    # `run`: 0 for the trial's own server (as tuner_measurements.run).
    __table_args__ = (UniqueConstraint("trial_id", "run"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(
        ForeignKey("tuner_trials.id", ondelete="CASCADE"), nullable=False
    )
    run: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    passed: Mapped[bool] = mapped_column(Boolean, nullable=False)
    prompts: Mapped[int] = mapped_column(Integer, nullable=False)
    exact_match_rate: Mapped[float] = mapped_column(Float, nullable=False)
    mean_common_prefix: Mapped[float] = mapped_column(Float, nullable=False)  # tokens
    common_prefix_share: Mapped[float] = mapped_column(Float, nullable=False)  # 0..1
    mean_logprob_divergence: Mapped[float | None] = mapped_column(Float)  # nats
    lossless: Mapped[str | None] = mapped_column(Text)  # e.g. "speculative_method=ngram"
    task_accuracy: Mapped[float | None] = mapped_column(Float)  # of quality.tasks, 0..1
    gate_s: Mapped[float] = mapped_column(Float, nullable=False)  # the gate's own time
    reason: Mapped[str | None] = mapped_column(Text)
    sample: Mapped[str | None] = mapped_column(Text)  # the first diverging answer, beside its ref
    answers: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    # The tie-aware gate (None on checks stored before it): answers by verdict, the rule that
    # judged, and {"first_near_tie", "first_divergence": Flip dicts, "worst": Drift dict}.
    identical: Mapped[int | None] = mapped_column(Integer)
    near_ties: Mapped[int | None] = mapped_column(Integer)
    diverging: Mapped[int | None] = mapped_column(Integer)
    failed: Mapped[int | None] = mapped_column(Integer)  # requests that failed
    rule: Mapped[str | None] = mapped_column(Text)  # its name, a colon, why it applied
    flips: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))

    trial: Mapped[TrialModel] = relationship(back_populates="quality_checks")


class HeadToHeadModel(Base):
    """A study's finalists measured side by side: each challenger's ratio to the leader, every
    round with its time, and the trial the study chose with why (the latest row counts)."""

    __tablename__ = "tuner_head_to_heads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(
        ForeignKey("tuner_studies.id", ondelete="CASCADE"), nullable=False
    )
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    leader: Mapped[int] = mapped_column(Integer, nullable=False)  # trial numbers
    pick: Mapped[int] = mapped_column(Integer, nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    together: Mapped[bool] = mapped_column(Boolean, nullable=False)
    ratios: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    rounds: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)


class PredictionModel(Base):
    """A performance-model prediction for one configuration at one concurrency level.

    Predictions are kept apart from measurements by table and by `source` (e.g. "perfmodel"), and
    belong to a study by name: a plan can be stored before its study has run a trial.
    """

    __tablename__ = "tuner_predictions"
    __table_args__ = (
        UniqueConstraint("study_name", "source", "engine", "gpu_type", "config_key",
                         "concurrency", name="uq_tuner_predictions_key"),
        Index("ix_tuner_predictions_study", "study_name", "source"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_name: Mapped[str] = mapped_column(String(MAX_INDEXED_STRING_LENGTH), nullable=False)
    source: Mapped[str] = mapped_column(String(32), nullable=False)
    engine: Mapped[str] = mapped_column(String(64), nullable=False)
    gpu_type: Mapped[str] = mapped_column(String(64), nullable=False)
    calibration: Mapped[str] = mapped_column(Text, nullable=False)  # which fitted factors
    config_key: Mapped[str] = mapped_column(String(64), nullable=False)  # digest of params
    params: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    concurrency: Mapped[int] = mapped_column(Integer, nullable=False)
    fits: Mapped[bool] = mapped_column(Boolean, nullable=False)
    output_tok_s_per_gpu: Mapped[float] = mapped_column(Float, nullable=False)
    tok_s_per_user: Mapped[float] = mapped_column(Float, nullable=False)
    ttft_ms: Mapped[float] = mapped_column(Float, nullable=False)
    meets_sla: Mapped[bool] = mapped_column(Boolean, nullable=False)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
