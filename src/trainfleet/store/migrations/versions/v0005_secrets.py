"""Secrets: each team's named sets of values, encrypted (only the keys' names in clear).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

TEXT = sa.Text()
TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("team", TEXT, sa.ForeignKey("teams.name", ondelete="CASCADE"), nullable=False),
        sa.Column("name", TEXT, nullable=False),
        sa.Column("keys", TEXT, nullable=False),
        sa.Column("data", TEXT, nullable=False),
        sa.Column("user", TEXT, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("team", "name"),
    )


def downgrade() -> None:
    op.drop_table("secrets")
