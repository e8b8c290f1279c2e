"""The audit trail: one row per change made through the server, or refused, in order.

Rows are only ever added (the store has no way to change or delete one). ``id`` is the
order: SQLite's AUTOINCREMENT never reuses an id, PostgreSQL's sequence never goes back.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

TEXT = sa.Text()
AUDIT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # SQLite: the rowid itself


def _text(name: str) -> sa.Column[str]:
    return sa.Column(name, TEXT, nullable=False, server_default="")


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", AUDIT_ID, primary_key=True, autoincrement=True),
        sa.Column("time", sa.Double(), nullable=False),
        _text("user"),
        _text("token"),
        sa.Column("action", TEXT, nullable=False),
        _text("target"),
        _text("team"),
        _text("source"),
        sa.Column("outcome", TEXT, nullable=False),
        _text("detail"),
        sqlite_autoincrement=True,
    )
    # Newest first by id (the primary key), also within a team, a user or an action.
    op.create_index("ix_audit_team", "audit", ["team", "id"])
    op.create_index("ix_audit_user", "audit", ["user", "id"])
    op.create_index("ix_audit_action", "audit", ["action", "id"])
    op.create_index("ix_audit_time", "audit", ["time"])


def downgrade() -> None:
    for index in ("ix_audit_time", "ix_audit_action", "ix_audit_user", "ix_audit_team"):
        op.drop_index(index, "audit")
    op.drop_table("audit")
