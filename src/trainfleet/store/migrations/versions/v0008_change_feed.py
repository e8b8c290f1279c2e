"""The change feed: each event carries its job's team (so an event outlives its job's row,
and a reader of every job's events knows who may see each), and each job its queue (a
filter of the job list, and its index).

Old events take the team of their job; old jobs the queue of their stored spec
(``default`` where it names none, as the spec's default is). An event no longer needs its
job's row (the foreign key goes): a deleted job leaves its ``deleted`` event. SQLite
rebuilds the table for that, keeping the ids it handed out (its ``sqlite_sequence``).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def _text(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=False, server_default="")


FK_NAMES = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}
"""Names for SQLite's unnamed foreign keys, so that a batch can drop one."""


def _sqlite() -> bool:
    return bool(op.get_bind().dialect.name == "sqlite")


def _fk_name() -> str:
    """The name of the events' foreign key: PostgreSQL's own, or FK_NAMES's in SQLite."""
    return "fk_events_job_id_jobs" if _sqlite() else "events_job_id_fkey"


def _last_event_id() -> int:
    rows = (
        op.get_bind()
        .exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = 'events'")
        .fetchall()
    )
    return int(rows[0][0]) if rows else 0


def upgrade() -> None:
    if _sqlite():
        last = _last_event_id()
        with op.batch_alter_table(
            "events",
            recreate="always",
            naming_convention=FK_NAMES,
            table_kwargs={"sqlite_autoincrement": True},
        ) as events:
            events.drop_constraint(_fk_name(), type_="foreignkey")
            events.add_column(_text("team"))
        op.execute(f"UPDATE sqlite_sequence SET seq = MAX(seq, {last}) WHERE name = 'events'")
        op.execute(
            f"INSERT INTO sqlite_sequence (name, seq) SELECT 'events', {last} "
            "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'events')"
        )
    else:
        with op.batch_alter_table("events") as events:
            events.drop_constraint(_fk_name(), type_="foreignkey")
            events.add_column(_text("team"))
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(_text("queue"))
    op.execute(
        "UPDATE events SET team = COALESCE((SELECT jobs.team FROM jobs "
        "WHERE jobs.id = events.job_id), '')"
    )
    queue = "json_extract(spec, '$.queue')" if _sqlite() else "(spec::json ->> 'queue')"
    op.execute(f"UPDATE jobs SET queue = COALESCE({queue}, 'default')")
    op.create_index("ix_jobs_queue", "jobs", ["queue", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", "jobs")
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("queue")
    op.execute("DELETE FROM events WHERE job_id NOT IN (SELECT id FROM jobs)")
    with op.batch_alter_table("events") as events:
        events.drop_column("team")
        events.create_foreign_key(_fk_name(), "jobs", ["job_id"], ["id"], ondelete="CASCADE")
