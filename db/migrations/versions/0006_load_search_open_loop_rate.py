"""A trial's load search (its highest load that met the SLA, and why it ended there), and each
open-loop level's achieved request rate and how often the in-flight cap held a request back.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

Written by hand. All columns are nullable: trials from before swept fixed levels (no search),
and their levels kept no achieved rate or cap count.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tuner_trials") as batch:
        batch.add_column(sa.Column("load_at_sla", sa.Float(), nullable=True))
        batch.add_column(sa.Column("load_search", sa.Text(), nullable=True))
    with op.batch_alter_table("tuner_measurements") as batch:
        batch.add_column(sa.Column("achieved_request_rate", sa.Float(), nullable=True))
        batch.add_column(sa.Column("capped_requests", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_measurements") as batch:
        batch.drop_column("capped_requests")
        batch.drop_column("achieved_request_rate")
    with op.batch_alter_table("tuner_trials") as batch:
        batch.drop_column("load_search")
        batch.drop_column("load_at_sla")
