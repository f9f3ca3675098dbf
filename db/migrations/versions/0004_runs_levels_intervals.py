"""Measured levels get a position, a run, confidence intervals and engine gauges; trials get
their confirmation.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

Written by hand. `level` (position in the sweep) replaces `concurrency` in the unique key, since
open-loop levels are request rates; rows measured before get their rank by concurrency, which
was their sweep order. `run` 0 is a trial's own sweep, 1 its confirmation in a fresh server.
Every other column is nullable: None means not measured (rows from before, or not available).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MEASUREMENT_FLOATS = ("request_rate", "output_tok_s_ci95", "ttft_mean_ms", "ttft_mean_ci95_ms",
                      "itl_mean_ms", "itl_mean_ci95_ms", "kv_cache_usage_max",
                      "requests_running_max", "requests_waiting_max")
MEASUREMENT_INTS = ("rounds", "preemptions")


def upgrade() -> None:
    op.add_column("tuner_measurements",
                  sa.Column("run", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("tuner_measurements", sa.Column("level", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE tuner_measurements SET level = (SELECT COUNT(*) FROM tuner_measurements AS m2 "
        "WHERE m2.trial_id = tuner_measurements.trial_id "
        "AND m2.concurrency < tuner_measurements.concurrency)"
    )
    for name in MEASUREMENT_FLOATS:
        op.add_column("tuner_measurements", sa.Column(name, sa.Float(), nullable=True))
    for name in MEASUREMENT_INTS:
        op.add_column("tuner_measurements", sa.Column(name, sa.Integer(), nullable=True))
    op.add_column("tuner_measurements", sa.Column("converged", sa.Boolean(), nullable=True))
    with op.batch_alter_table("tuner_measurements") as batch:
        batch.alter_column("level", existing_type=sa.Integer(), nullable=False)
        batch.drop_constraint("uq_tuner_measurements_trial_id_concurrency", type_="unique")
        batch.create_unique_constraint("uq_tuner_measurements_trial_id_run_level",
                                       ["trial_id", "run", "level"])
    op.add_column("tuner_trials", sa.Column("confirm_state", sa.String(16), nullable=True))
    op.add_column("tuner_trials", sa.Column("confirm_objective", sa.Float(), nullable=True))
    op.add_column("tuner_trials", sa.Column("confirm_meets_sla", sa.Boolean(), nullable=True))
    op.add_column("tuner_trials", sa.Column("confirm_reason", sa.Text(), nullable=True))
    op.add_column("tuner_trials",
                  sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tuner_trials") as batch:
        for name in ("confirm_state", "confirm_objective", "confirm_meets_sla", "confirm_reason",
                     "confirmed_at"):
            batch.drop_column(name)
    op.execute("DELETE FROM tuner_measurements WHERE run <> 0")
    with op.batch_alter_table("tuner_measurements") as batch:
        batch.drop_constraint("uq_tuner_measurements_trial_id_run_level", type_="unique")
        batch.create_unique_constraint("uq_tuner_measurements_trial_id_concurrency",
                                       ["trial_id", "concurrency"])
        for name in ("run", "level", "converged", *MEASUREMENT_FLOATS, *MEASUREMENT_INTS):
            batch.drop_column(name)
