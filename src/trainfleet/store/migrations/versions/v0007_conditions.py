"""Conditions: jobs, tasks and events carry a condition code beside their message, and a
job's waiting reason is kept apart from the reason of its state.

Old rows are coded from their message's first words, as trainfleet wrote them until
now (the only place a code is read from words; see trainfleet.domain.conditions), else
from their state. A queued job's ``waiting ...`` reason moves to ``waiting``.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

# The first words of the reasons older trainfleets wrote, and their codes: a copy, as a
# migration must read old rows the same way whatever the code becomes.
PREFIXES = (
    ("environment build failed", "environment-build-failed"),
    ("could not start", "could-not-start"),
    ("could not reserve ports", "no-free-port"),
    ("deadline exceeded", "deadline-exceeded"),
    ("disk full", "disk-full"),
    ("lost", "lost"),
    ("admission failed", "admission-failed"),
    ("preempted", "preempted"),
    ("not started", "not-started"),
    ("stopped", "stopped"),
    ("internal error", "internal-error"),
    ("submitted", "submitted"),
    ("adopted", "adopted"),
    ("setup:", "waiting-for-environment"),
)
WAITING = (
    ("waiting for quota", "waiting-for-quota"),
    ("waiting for resources", "waiting-for-resources"),
    ("waiting for its turn", "waiting-for-turn"),
    ("waiting to be admitted", "waiting-for-admission"),
    ("waiting for", "waiting-for-preemption"),
)
JOB_STATES = (
    ("queued", "submitted"),
    ("starting", "admitted"),
    ("running", "started"),
    ("restarting", "restarting"),
    ("succeeded", "succeeded"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
)
TASK_STATES = (
    ("starting", "started"),
    ("running", "started"),
    ("restarting", "restarting"),
    ("succeeded", "exited"),
    ("failed", "exited"),
    ("cancelled", "cancelled"),
)


def _text(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.Text(), nullable=False, server_default="")


def _case(
    column: str, prefixes: tuple[tuple[str, str], ...], states: tuple[tuple[str, str], ...]
) -> str:
    """SQL: the code of ``column``'s first words, else of the row's state, else ''."""
    whens = [f"WHEN {column} LIKE '{words}%' THEN '{code}'" for words, code in prefixes]
    whens += [f"WHEN state = '{state}' THEN '{code}'" for state, code in states]
    return "CASE " + " ".join(whens) + " ELSE '' END"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        for name in ("code", "waiting_code", "waiting"):
            jobs.add_column(_text(name))
    for table in ("tasks", "events"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(_text("code"))
    waits = "state = 'queued' AND reason LIKE 'waiting%'"
    op.execute(
        f"UPDATE jobs SET waiting = reason, waiting_code = {_case('reason', WAITING, ())} "
        f"WHERE {waits}"
    )
    op.execute(f"UPDATE jobs SET reason = '' WHERE {waits}")
    op.execute(f"UPDATE jobs SET code = {_case('reason', PREFIXES, JOB_STATES)}")
    op.execute(f"UPDATE tasks SET code = {_case('reason', PREFIXES, TASK_STATES)}")
    job_events = _case("message", PREFIXES + WAITING, JOB_STATES)
    op.execute(f"UPDATE events SET code = {job_events} WHERE task = ''")
    task_events = _case("message", PREFIXES, TASK_STATES)
    op.execute(f"UPDATE events SET code = {task_events} WHERE task <> ''")
    # A queued task was never started, or was stopped when its job was preempted.
    op.execute(
        "UPDATE tasks SET code = CASE WHEN reason = '' THEN 'submitted' ELSE 'preempted' END "
        "WHERE state = 'queued'"
    )
    op.execute("UPDATE events SET code = 'preempted' WHERE task <> '' AND state = 'queued'")


def downgrade() -> None:
    # The waiting reason goes back to where older trainfleets read it.
    op.execute("UPDATE jobs SET reason = waiting WHERE waiting <> '' AND state = 'queued'")
    for table in ("events", "tasks"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("code")
    with op.batch_alter_table("jobs") as jobs:
        for name in ("waiting", "waiting_code", "code"):
            jobs.drop_column(name)
