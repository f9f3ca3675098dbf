"""Speculative-decoding counters per measured level (from the engine's /metrics).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Written by hand: three nullable columns, so rows measured before stay valid (None = not read).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("tuner_measurements", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_measurements") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
