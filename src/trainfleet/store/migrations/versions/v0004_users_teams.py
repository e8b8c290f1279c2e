"""Users, teams and their members; every token belongs to a user, every job and queue to a team.

Data stored before is adopted: a built-in ``admin`` user (an administrator) and a team
``default`` that owns every queue and job. Admin tokens become the ``admin`` user's; every
other token becomes a user of its own name, a member of ``default``, and the jobs it
submitted stay that user's. A non-admin token named ``admin`` would now read as the
administrator in events: it is revoked.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

TEXT = sa.Text()
TIME: sa.Double[float] = sa.Double()
ADMIN, DEFAULT = "admin", "default"


def upgrade() -> None:
    now = time.time()
    users = op.create_table(
        "users",
        sa.Column("name", TEXT, primary_key=True),
        sa.Column("admin", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("disabled_at", TIME),
    )
    teams = op.create_table(
        "teams",
        sa.Column("name", TEXT, primary_key=True),
        sa.Column("default_queue", TEXT, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
    )
    members = op.create_table(
        "members",
        sa.Column("team", TEXT, sa.ForeignKey("teams.name", ondelete="CASCADE"), nullable=False),
        sa.Column("user", TEXT, sa.ForeignKey("users.name", ondelete="CASCADE"), nullable=False),
        sa.Column("role", TEXT, nullable=False),
        sa.PrimaryKeyConstraint("team", "user"),
    )
    op.create_index("ix_members_user", "members", ["user", "team"])
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("user", TEXT, nullable=False, server_default=ADMIN))
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("team", TEXT, nullable=False, server_default=DEFAULT))
    with op.batch_alter_table("queues") as batch:
        batch.add_column(sa.Column("team", TEXT, nullable=False, server_default=DEFAULT))
    op.create_index("ix_jobs_team", "jobs", ["team", "created_at", "id"])
    op.create_index("ix_tokens_user_name", "tokens", ["user", "name"])

    bind = op.get_bind()
    op.bulk_insert(users, [{"name": ADMIN, "admin": True, "created_at": now}])
    op.bulk_insert(teams, [{"name": DEFAULT, "default_queue": DEFAULT, "created_at": now}])
    tokens = bind.execute(sa.text("SELECT id, name, admin FROM tokens")).mappings().all()
    adopted = sorted({t["name"] for t in tokens if not t["admin"] and t["name"] != ADMIN})
    op.bulk_insert(users, [{"name": name, "admin": False, "created_at": now} for name in adopted])
    op.bulk_insert(members, [{"team": DEFAULT, "user": n, "role": "member"} for n in adopted])
    for token in tokens:
        owner = ADMIN if token["admin"] or token["name"] == ADMIN else token["name"]
        bind.execute(
            sa.text('UPDATE tokens SET "user" = :user WHERE id = :id'),
            {"user": owner, "id": token["id"]},
        )
    bind.execute(
        sa.text(
            "UPDATE tokens SET revoked_at = :now WHERE name = :admin AND NOT admin "
            "AND revoked_at IS NULL"
        ),
        {"now": now, "admin": ADMIN},
    )
    admin_names = sorted({t["name"] for t in tokens if t["admin"]})
    for name in admin_names:  # jobs name the user now, not the token
        bind.execute(
            sa.text('UPDATE jobs SET "user" = :admin WHERE "user" = :name'),
            {"admin": ADMIN, "name": name},
        )


def downgrade() -> None:
    op.drop_index("ix_tokens_user_name", "tokens")
    op.drop_index("ix_jobs_team", "jobs")
    for table in ("queues", "jobs", "tokens"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("team" if table != "tokens" else "user")
    op.drop_index("ix_members_user", "members")
    op.drop_table("members")
    op.drop_table("teams")
    op.drop_table("users")
