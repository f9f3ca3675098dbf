"""Server rows carry their own owner: the pid and start time of the tuner process that launched
the server.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

Written by hand. Before, a server's owner was read from its trial's worker, so a confirmation's
server (launched by `tuner confirm`, not by the trial's worker) looked orphaned to another tuner
on the same host, which stopped it mid-measurement. Rows from before keep NULL: their owner is
still taken from the trial, as then.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tuner_servers") as batch:
        batch.add_column(sa.Column("owner_pid", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("owner_create_time", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_servers") as batch:
        batch.drop_column("owner_create_time")
        batch.drop_column("owner_pid")
