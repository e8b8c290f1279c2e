"""A job's submission key: the digest of its submitter and the ``Idempotency-Key`` they
sent it with, unique, so that a submission sent again (its answer lost with a connection)
finds the job it stored the first time instead of storing a second one. Jobs sent without
one have none (NULL: never equal to another).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("submission_key", sa.Text(), nullable=True))
    op.create_index("ix_jobs_submission_key", "jobs", ["submission_key"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_jobs_submission_key", "jobs")
    # Not Alembic's batch mode: on SQLite it copies the table, which drops its triggers.
    op.execute("ALTER TABLE jobs DROP COLUMN submission_key")
