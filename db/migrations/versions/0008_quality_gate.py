"""The quality gate: a study's reference answers, and each trial's answers against them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Written by hand. `tuner_quality_references` holds one row per study (unique study_id): the worker
that inserts it computes the answers while the others wait, and it is kept across resumes.
`tuner_quality_checks` holds a trial's figures and answers (run 0: its own server). Databases from
before have neither table: their trials have no quality figures.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tuner_quality_references",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("answers", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("claimed_by", sa.String(length=256), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("answer_s", sa.Float(), nullable=True),
        sa.Column("engine_version", sa.String(length=256), nullable=True),
        sa.CheckConstraint("state IN ('computing', 'ready')",
                           name=op.f("ck_tuner_quality_references_state")),
        sa.ForeignKeyConstraint(["study_id"], ["tuner_studies.id"], ondelete="CASCADE",
                                name=op.f("fk_tuner_quality_references_study_id_tuner_studies")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_quality_references")),
        sa.UniqueConstraint("study_id", name=op.f("uq_tuner_quality_references_study_id")),
    )
    op.create_table(
        "tuner_quality_checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("run", sa.Integer(), server_default="0", nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("prompts", sa.Integer(), nullable=False),
        sa.Column("exact_match_rate", sa.Float(), nullable=False),
        sa.Column("mean_common_prefix", sa.Float(), nullable=False),
        sa.Column("common_prefix_share", sa.Float(), nullable=False),
        sa.Column("mean_logprob_divergence", sa.Float(), nullable=True),
        sa.Column("lossless", sa.Text(), nullable=True),
        sa.Column("task_accuracy", sa.Float(), nullable=True),
        sa.Column("gate_s", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("sample", sa.Text(), nullable=True),
        sa.Column("answers", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["trial_id"], ["tuner_trials.id"], ondelete="CASCADE",
                                name=op.f("fk_tuner_quality_checks_trial_id_tuner_trials")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_quality_checks")),
        sa.UniqueConstraint("trial_id", "run", name=op.f("uq_tuner_quality_checks_trial_id_run")),
    )


def downgrade() -> None:
    op.drop_table("tuner_quality_checks")
    op.drop_table("tuner_quality_references")
