"""Workflows on a server: each workflow as sent, its schedule's state, its runs and their
steps. A run keeps the workflow's file and folder it started from (a later submission
of the workflow changes its next runs only). A run's scheduled time is unique within its
workflow: whoever stores the run of a time first, no other run of that time is ever
stored (across restarts and ``kill -9``).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

TEXT = sa.Text()
TIME: sa.Double[float] = sa.Double()


def _text(name: str, default: str = "") -> sa.Column[str]:
    return sa.Column(name, TEXT, nullable=False, server_default=default)


def _workflow_id() -> sa.Column[str]:
    return sa.Column(
        "workflow_id", TEXT, sa.ForeignKey("workflows.id", ondelete="CASCADE"), nullable=False
    )


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("id", TEXT, primary_key=True),
        _text("name"),
        _text("team"),
        _text("user"),
        _text("source"),
        _text("filename"),
        _text("tree"),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.UniqueConstraint("team", "name", name="uq_workflows_team_name"),
    )
    op.create_table(
        "schedules",
        sa.Column(
            "workflow_id",
            TEXT,
            sa.ForeignKey("workflows.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        _text("cron"),
        _text("timezone", "UTC"),
        _text("code", "active"),
        _text("reason"),
        sa.Column("last_time", TIME, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", TEXT, primary_key=True),
        _workflow_id(),
        _text("workflow"),
        _text("team"),
        _text("user"),
        sa.Column("number", sa.Integer(), nullable=False),
        _text("trigger"),
        _text("state"),
        _text("code"),
        _text("reason"),
        sa.Column("scheduled_for", TIME, nullable=True),
        _text("parameters", "{}"),
        _text("source"),
        _text("filename"),
        _text("tree"),
        sa.Column("retries", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.UniqueConstraint("workflow_id", "number", name="uq_runs_number"),
        sa.UniqueConstraint("workflow_id", "scheduled_for", name="uq_runs_scheduled_for"),
    )
    op.create_index("ix_runs_state", "runs", ["state"])
    op.create_table(
        "steps",
        sa.Column("run_id", TEXT, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        _text("step"),
        sa.Column("position", sa.Integer(), nullable=False),
        _text("state"),
        sa.Column("tries", sa.Integer(), nullable=False, server_default="0"),
        _text("jobs", "[]"),
        _text("reason"),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("run_id", "step"),
    )


def downgrade() -> None:
    op.drop_table("steps")
    op.drop_index("ix_runs_state", "runs")
    op.drop_table("runs")
    op.drop_table("schedules")
    op.drop_table("workflows")
