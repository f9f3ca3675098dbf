"""Trials may be `pruned` (stopped once clearly below the incumbent) and keep the levels their
sweep skipped, with why.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Written by hand. `skipped_levels` is a JSON list of {level, concurrency, request_rate, reason};
None for trials from before (they skipped nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = "state IN ('running', 'complete', 'failed', 'infeasible')"
_AFTER = "state IN ('running', 'complete', 'failed', 'infeasible', 'pruned')"


def upgrade() -> None:
    with op.batch_alter_table("tuner_trials") as batch:
        batch.drop_constraint(op.f("ck_tuner_trials_state"), type_="check")
        batch.create_check_constraint("state", _AFTER)
        batch.add_column(sa.Column("skipped_levels", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    op.execute("UPDATE tuner_trials SET state = 'complete' WHERE state = 'pruned'")
    with op.batch_alter_table("tuner_trials") as batch:
        batch.drop_column("skipped_levels")
        batch.drop_constraint(op.f("ck_tuner_trials_state"), type_="check")
        batch.create_check_constraint("state", _BEFORE)
