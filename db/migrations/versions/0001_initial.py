"""tuner's initial tables: studies, trials, measurements, servers.

Revision ID: 0001
Revises:
Create Date: 2025-11-30

Written by hand. Constraint names are the ones db.models.NAMING_CONVENTION gives, wrapped in
op.f() so the convention (which Alembic takes from the target metadata) is not applied twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TRIAL_STATES = "state IN ('running', 'complete', 'failed', 'infeasible')"


def _utc() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "tuner_studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("engine", sa.String(64), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("space", sa.JSON(), nullable=False),
        sa.Column("tuner_version", sa.String(64), nullable=False),
        sa.Column("created_at", _utc(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_studies")),
        sa.UniqueConstraint("name", name=op.f("uq_tuner_studies_name")),
    )
    op.create_table(
        "tuner_trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("launch_plan", sa.JSON(), nullable=True),
        sa.Column("objective", sa.Float(), nullable=True),
        sa.Column("meets_sla", sa.Boolean(), nullable=True),
        sa.Column("failure_kind", sa.String(32), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("log_tail", sa.Text(), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=True),
        sa.Column("engine_version", sa.String(256), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=True),
        sa.Column("hardware", sa.JSON(), nullable=True),
        sa.Column("worker_host", sa.String(256), nullable=True),
        sa.Column("worker_pid", sa.Integer(), nullable=True),
        sa.Column("started_at", _utc(), nullable=False),
        sa.Column("finished_at", _utc(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_trials")),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["tuner_studies.id"],
            name=op.f("fk_tuner_trials_study_id_tuner_studies"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint("study_id", "number", name=op.f("uq_tuner_trials_study_id_number")),
        sa.CheckConstraint(_TRIAL_STATES, name=op.f("ck_tuner_trials_state")),
    )
    op.create_table(
        "tuner_measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("request_throughput", sa.Float(), nullable=False),
        sa.Column("output_tok_s", sa.Float(), nullable=False),
        sa.Column("output_tok_s_per_gpu", sa.Float(), nullable=False),
        sa.Column("ttft_p50_ms", sa.Float(), nullable=True),
        sa.Column("ttft_p90_ms", sa.Float(), nullable=True),
        sa.Column("ttft_p99_ms", sa.Float(), nullable=True),
        sa.Column("itl_p50_ms", sa.Float(), nullable=True),
        sa.Column("itl_p90_ms", sa.Float(), nullable=True),
        sa.Column("itl_p99_ms", sa.Float(), nullable=True),
        sa.Column("tpot_p50_ms", sa.Float(), nullable=True),
        sa.Column("tpot_p90_ms", sa.Float(), nullable=True),
        sa.Column("e2e_p50_ms", sa.Float(), nullable=True),
        sa.Column("e2e_p90_ms", sa.Float(), nullable=True),
        sa.Column("tok_s_per_user_p50", sa.Float(), nullable=True),
        sa.Column("tok_s_per_user_p90", sa.Float(), nullable=True),
        sa.Column("goodput_rps", sa.Float(), nullable=False),
        sa.Column("meets_sla", sa.Boolean(), nullable=False),
        sa.Column("error_sample", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_measurements")),
        sa.ForeignKeyConstraint(
            ["trial_id"],
            ["tuner_trials.id"],
            name=op.f("fk_tuner_measurements_trial_id_tuner_trials"),
            ondelete="CASCADE",
        ),
        sa.UniqueConstraint(
            "trial_id", "concurrency", name=op.f("uq_tuner_measurements_trial_id_concurrency")
        ),
    )
    op.create_table(
        "tuner_servers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(256), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("pgid", sa.Integer(), nullable=False),
        sa.Column("create_time", sa.Float(), nullable=False),
        sa.Column("log_path", sa.Text(), nullable=False),
        sa.Column("started_at", _utc(), nullable=False),
        sa.Column("stopped_at", _utc(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuner_servers")),
        sa.ForeignKeyConstraint(
            ["trial_id"],
            ["tuner_trials.id"],
            name=op.f("fk_tuner_servers_trial_id_tuner_trials"),
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("tuner_servers")
    op.drop_table("tuner_measurements")
    op.drop_table("tuner_trials")
    op.drop_table("tuner_studies")
