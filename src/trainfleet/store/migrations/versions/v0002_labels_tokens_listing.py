"""Job labels, API tokens, tasks kept in spec order, and indexes for listing jobs by page.

Jobs are listed newest first by ``(created_at, id)``, alone or filtered by state, name or
user: each gets an index in that order, so a page reads only its own rows.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

TEXT = sa.Text()
TIME: sa.Double[float] = sa.Double()
LISTING = {"ix_jobs_state": "state", "ix_jobs_name": "name", "ix_jobs_user": "user"}


def upgrade() -> None:
    op.create_table(
        "job_labels",
        sa.Column("job_id", TEXT, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key", TEXT, nullable=False),
        sa.Column("value", TEXT, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "key"),
    )
    op.create_index("ix_job_labels_key_value", "job_labels", ["key", "value", "job_id"])
    op.create_table(
        "tokens",
        sa.Column("id", TEXT, primary_key=True),
        sa.Column("name", TEXT, nullable=False),
        sa.Column("digest", TEXT, nullable=False, unique=True),
        sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("revoked_at", TIME),
    )
    op.add_column("tasks", sa.Column("position", sa.Integer(), nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "sqlite":  # rows stored before kept their order in rowid
        op.execute("UPDATE tasks SET position = rowid")
    op.drop_index("ix_jobs_created_at", "jobs")
    op.create_index("ix_jobs_created", "jobs", ["created_at", "id"])
    for name, column in LISTING.items():
        op.create_index(name, "jobs", [column, "created_at", "id"])


def downgrade() -> None:
    for name in LISTING:
        op.drop_index(name, "jobs")
    op.drop_index("ix_jobs_created", "jobs")
    op.create_index("ix_jobs_created_at", "jobs", ["created_at"])
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("position")
    op.drop_table("tokens")
    op.drop_index("ix_job_labels_key_value", "job_labels")
    op.drop_table("job_labels")
