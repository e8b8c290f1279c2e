"""Queues: each one's configuration (quota, cohort, borrowing limit) as JSON.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "queues",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("config", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("queues")
