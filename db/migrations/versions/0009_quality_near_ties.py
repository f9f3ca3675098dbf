"""The tie-aware quality gate: each check's answers counted as identical, near-tie or diverging,
the rule that judged it, and its first near-tie, first divergence and widest log-probability
difference.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07

Written by hand. Every column is nullable: a check stored before it has no counts (the gate then
judged by exact match and common prefix, which its other columns still hold).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("identical", sa.Integer()),
    ("near_ties", sa.Integer()),
    ("diverging", sa.Integer()),
    ("failed", sa.Integer()),
    ("rule", sa.Text()),
    ("flips", sa.JSON(none_as_null=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("tuner_quality_checks") as batch:
        for name, kind in COLUMNS:
            batch.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_quality_checks") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
