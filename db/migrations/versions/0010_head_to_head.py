"""The finalists head to head: one row per head-to-head of a study (the latest counts).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07

Written by hand. Databases from before have none: their winner is the best confirmed trial, as
it was.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tuner_head_to_heads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("leader", sa.Integer(), nullable=False),
        sa.Column("pick", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("together", sa.Boolean(), nullable=False),
        sa.Column("ratios", sa.JSON(), nullable=False),
        sa.Column("rounds", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["tuner_studies.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("tuner_head_to_heads")
