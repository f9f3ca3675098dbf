"""Where each server's start went, phase by phase (tuner/serve/start_phases.py).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07

Written by hand. Servers recorded before have none.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tuner_servers") as batch:
        batch.add_column(sa.Column("start_phases", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_servers") as batch:
        batch.drop_column("start_phases")
