"""Jobs, their tasks and their events.

Every ``CREATE`` is ``IF NOT EXISTS``: a SQLite file made before Alembic (``PRAGMA
user_version`` 1) already has these very tables, and is adopted as it is.

Revision ID: 0001
Revises: none
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

TEXT = sa.Text()
TIME: sa.Double[float] = sa.Double()
EVENT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite: the rowid itself


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", TEXT, primary_key=True),
        sa.Column("name", TEXT, nullable=False),
        sa.Column("framework", TEXT, nullable=False),
        sa.Column("state", TEXT, nullable=False),
        sa.Column("reason", TEXT, nullable=False, server_default=""),
        sa.Column("spec", TEXT, nullable=False),
        sa.Column("source", TEXT, nullable=False),
        sa.Column("workdir", TEXT, nullable=False),
        sa.Column("user", TEXT, nullable=False, server_default=""),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("started_at", TIME),
        sa.Column("finished_at", TIME),
        if_not_exists=True,
    )
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"], if_not_exists=True)
    op.create_table(
        "tasks",
        sa.Column("job_id", TEXT, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("role", TEXT, nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("state", TEXT, nullable=False),
        sa.Column("address", TEXT, nullable=False, server_default=""),
        sa.Column("gpus", TEXT, nullable=False, server_default=""),
        sa.Column("pid", sa.Integer()),
        sa.Column("restarts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("exit_code", sa.Integer()),
        sa.Column("reason", TEXT, nullable=False, server_default=""),
        sa.Column("started_at", TIME),
        sa.Column("finished_at", TIME),
        sa.PrimaryKeyConstraint("job_id", "role", "index"),
        if_not_exists=True,
    )
    op.create_table(
        "events",
        sa.Column("id", EVENT_ID, primary_key=True, autoincrement=True),
        sa.Column("job_id", TEXT, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("task", TEXT, nullable=False, server_default=""),
        sa.Column("state", TEXT, nullable=False),
        sa.Column("message", TEXT, nullable=False, server_default=""),
        sqlite_autoincrement=True,  # ids never reused, so `list_events(after=...)` holds
        if_not_exists=True,
    )
    op.create_index("ix_events_job_id", "events", ["job_id", "id"], if_not_exists=True)


def downgrade() -> None:
    op.drop_table("events")
    op.drop_table("tasks")
    op.drop_table("jobs")
