"""Performance-model predictions, kept apart from measurements.

Revision ID: 0002
Revises: 0001
Create Date: 2025-12-01

Written by hand; constraint names as in db.models (explicit, short enough for PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tuner_predictions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_name", sa.String(512), nullable=False),
        sa.Column("source", sa.String(32), nullable=False),
        sa.Column("engine", sa.String(64), nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=False),
        sa.Column("calibration", sa.Text(), nullable=False),
        sa.Column("config_key", sa.String(64), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("fits", sa.Boolean(), nullable=False),
        sa.Column("output_tok_s_per_gpu", sa.Float(), nullable=False),
        sa.Column("tok_s_per_user", sa.Float(), nullable=False),
        sa.Column("ttft_ms", sa.Float(), nullable=False),
        sa.Column("meets_sla", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_predictions")),
        sa.UniqueConstraint("study_name", "source", "engine", "gpu_type", "config_key",
                            "concurrency", name=op.f("uq_tuner_predictions_key")),
    )
    op.create_index(op.f("ix_tuner_predictions_study"), "tuner_predictions",
                    ["study_name", "source"])


def downgrade() -> None:
    op.drop_index(op.f("ix_tuner_predictions_study"), table_name="tuner_predictions")
    op.drop_table("tuner_predictions")
