"""Jobs counted by team, queue and state (and by label), kept by the database itself; and
indexes of the jobs and tasks that have not ended.

A listing of jobs says how many match its filters, by state. Counting them anew on each
page read every matching row (a million for an administrator's first page). Two tables
hold the counts instead: ``job_counts`` per (team, queue, state) and ``job_label_counts``
per (label key, value, team, queue, state). Triggers keep them exact on every insert,
update and delete of a job or a label, whoever writes it (a row of a job with a label
counts while both exist); a count that falls to 0 is removed. They start from the rows
stored before. SQLite's triggers count row by row; PostgreSQL's count each statement's rows
at once, so that a bulk insert of a million jobs updates each count once, not a million
times (each update of a row leaves a version behind until the transaction ends).

The partial indexes hold only the jobs and tasks that have not ended: a server's start
reads those (to adopt or queue them again) without reading every job ever stored. The
queries name the same ended states in the same order (``queries.UNFINISHED``), as SQLite
uses a partial index only where the query repeats its condition.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

TEXT = sa.Text()
UNFINISHED = "state NOT IN ('cancelled', 'failed', 'succeeded')"
"""A copy: a migration must read rows as it did when it was written."""
GROUP = '"team", "queue", "state"'
LABEL_GROUP = f'"key", "value", {GROUP}'


def _job(row: str, delta: int) -> str:
    """SQLite: count the job ``row`` (``NEW`` or ``OLD``) ``delta`` (1 or -1) times."""
    return (
        f"INSERT INTO job_counts ({GROUP}, n) VALUES ({row}.team, {row}.queue, {row}.state, "
        f"{delta}) ON CONFLICT ({GROUP}) DO UPDATE SET n = job_counts.n + excluded.n; "
        f"DELETE FROM job_counts WHERE team = {row}.team AND queue = {row}.queue "
        f"AND state = {row}.state AND n = 0;"
    )


def _labels_of_job(row: str, delta: int) -> str:
    """SQLite: count each stored label of the job ``row`` ``delta`` times."""
    return (
        f"INSERT INTO job_label_counts ({LABEL_GROUP}, n) SELECT l.key, l.value, {row}.team, "
        f"{row}.queue, {row}.state, {delta} FROM job_labels AS l WHERE l.job_id = {row}.id "
        f"ON CONFLICT ({LABEL_GROUP}) DO UPDATE SET n = job_label_counts.n + excluded.n; "
        'DELETE FROM job_label_counts WHERE n = 0 AND ("key", "value") IN '
        f"(SELECT l.key, l.value FROM job_labels AS l WHERE l.job_id = {row}.id);"
    )


def _label(row: str, delta: int) -> str:
    """SQLite: count the label ``row`` ``delta`` times, where its job is stored."""
    return (
        f"INSERT INTO job_label_counts ({LABEL_GROUP}, n) SELECT {row}.key, {row}.value, "
        f"j.team, j.queue, j.state, {delta} FROM jobs AS j WHERE j.id = {row}.job_id "
        f"ON CONFLICT ({LABEL_GROUP}) DO UPDATE SET n = job_label_counts.n + excluded.n; "
        f'DELETE FROM job_label_counts WHERE "key" = {row}.key AND "value" = {row}.value '
        "AND n = 0;"
    )


def _sqlite_body(table: str, rows: tuple[str, ...]) -> str:
    """SQLite: the statements that count ``rows`` (OLD uncounted, NEW counted) of ``table``."""
    parts = []
    for row in rows:
        delta = 1 if row == "NEW" else -1
        parts += [_job(row, delta), _labels_of_job(row, delta)] if table == "jobs" else []
        parts += [_label(row, delta)] if table == "job_labels" else []
    return " ".join(parts)


COUNTED = "id, state, team, queue"
"""The columns of a job that its counts depend on."""
JOB_CHANGED = (
    "OLD.id IS NOT NEW.id OR OLD.state IS NOT NEW.state OR OLD.team IS NOT NEW.team "
    "OR OLD.queue IS NOT NEW.queue"
)
LABEL_CHANGED = (
    "OLD.job_id IS NOT NEW.job_id OR OLD.key IS NOT NEW.key OR OLD.value IS NOT NEW.value"
)
# SQLite: (name, when, table, condition, rows). A job deleted is uncounted BEFORE its row
# goes, while its labels are still there (a cascade then deletes them without a job).
SQLITE_TRIGGERS = (
    ("jobs_counted", "AFTER INSERT", "jobs", "", ("NEW",)),
    ("jobs_recounted", f"AFTER UPDATE OF {COUNTED}", "jobs", JOB_CHANGED, ("OLD", "NEW")),
    ("jobs_uncounted", "BEFORE DELETE", "jobs", "", ("OLD",)),
    ("job_labels_counted", "AFTER INSERT", "job_labels", "", ("NEW",)),
    ("job_labels_recounted", "AFTER UPDATE", "job_labels", LABEL_CHANGED, ("OLD", "NEW")),
    ("job_labels_uncounted", "AFTER DELETE", "job_labels", "", ("OLD",)),
)


# PostgreSQL counts a statement's rows at once (its transition tables): a row counted
# again and again within one transaction (a bulk insert) would leave a version of the
# count behind each time, for every later change of it to walk.
def _jobs_of(rows: str, delta: int) -> str:
    return f"SELECT team, queue, state, {delta} AS d FROM {rows}"


def _pairs_of_jobs(rows: str, delta: int) -> str:
    return (
        f"SELECT l.key, l.value, j.team, j.queue, j.state, {delta} AS d "
        f"FROM {rows} AS j JOIN job_labels AS l ON l.job_id = j.id"
    )


def _pairs_of_labels(rows: str, delta: int) -> str:
    return (
        f"SELECT l.key, l.value, j.team, j.queue, j.state, {delta} AS d "
        f"FROM {rows} AS l JOIN jobs AS j ON j.id = l.job_id"
    )


def _apply(table: str, group: str, parts: tuple[str, ...]) -> str:
    """PostgreSQL: add the deltas ``parts`` give to ``table``'s counts, then remove those at 0."""
    delta = " UNION ALL ".join(parts)
    added = (
        f"INSERT INTO {table} ({group}, n) SELECT {group}, SUM(d) FROM ({delta}) AS delta "
        f"GROUP BY {group} HAVING SUM(d) <> 0 "
        f"ON CONFLICT ({group}) DO UPDATE SET n = {table}.n + excluded.n;"
    )
    if not any("-1 AS d" in part for part in parts):
        return added  # only added to: none falls to 0
    return (
        f"{added} DELETE FROM {table} WHERE n = 0 AND ({group}) IN "
        f"(SELECT {group} FROM ({delta}) AS delta);"
    )


UNCHANGED = (
    "IF NOT EXISTS (SELECT id, team, queue, state FROM new_rows "
    "EXCEPT SELECT id, team, queue, state FROM old_rows) THEN RETURN NULL; END IF;"
)
"""An update that changed no job's counted columns (the rows are as many, ids unique)."""
# PostgreSQL: (name, when, table, transition tables, body). The labels of a job deleted are
# uncounted by a row's BEFORE trigger, while they are still there (see SQLITE_TRIGGERS).
OLD, NEW = "OLD TABLE AS old_rows", "NEW TABLE AS new_rows"
POSTGRES_TRIGGERS = (
    (
        "jobs_counted", "AFTER INSERT", "jobs", NEW,
        _apply("job_counts", GROUP, (_jobs_of("new_rows", 1),))
        + _apply("job_label_counts", LABEL_GROUP, (_pairs_of_jobs("new_rows", 1),)),
    ),
    (
        "jobs_recounted", "AFTER UPDATE", "jobs", f"{OLD} {NEW}",
        UNCHANGED
        + _apply("job_counts", GROUP, (_jobs_of("old_rows", -1), _jobs_of("new_rows", 1)))
        + _apply(
            "job_label_counts",
            LABEL_GROUP,
            (_pairs_of_jobs("old_rows", -1), _pairs_of_jobs("new_rows", 1)),
        ),
    ),
    ("jobs_uncounted", "AFTER DELETE", "jobs", OLD,
     _apply("job_counts", GROUP, (_jobs_of("old_rows", -1),))),
    (
        "jobs_labels_uncounted", "BEFORE DELETE", "jobs", "",
        "IF NOT EXISTS (SELECT 1 FROM job_labels WHERE job_id = OLD.id) THEN RETURN OLD; "
        "END IF; "
        + _apply(
            "job_label_counts",
            LABEL_GROUP,
            (
                "SELECT l.key, l.value, OLD.team AS team, OLD.queue AS queue, "
                "OLD.state AS state, -1 AS d FROM job_labels AS l WHERE l.job_id = OLD.id",
            ),
        ),
    ),
    ("job_labels_counted", "AFTER INSERT", "job_labels", NEW,
     _apply("job_label_counts", LABEL_GROUP, (_pairs_of_labels("new_rows", 1),))),
    (
        "job_labels_recounted", "AFTER UPDATE", "job_labels", f"{OLD} {NEW}",
        _apply(
            "job_label_counts",
            LABEL_GROUP,
            (_pairs_of_labels("old_rows", -1), _pairs_of_labels("new_rows", 1)),
        ),
    ),
    ("job_labels_uncounted", "AFTER DELETE", "job_labels", OLD,
     _apply("job_label_counts", LABEL_GROUP, (_pairs_of_labels("old_rows", -1),))),
)  # fmt: skip


def _create_triggers(sqlite: bool) -> None:
    if sqlite:
        for name, when, table, condition, rows in SQLITE_TRIGGERS:
            guard = f" WHEN {condition}" if condition else ""
            op.execute(
                f"CREATE TRIGGER {name} {when} ON {table} FOR EACH ROW{guard} "
                f"BEGIN {_sqlite_body(table, rows)} END"
            )
        return
    for name, when, table, transitions, body in POSTGRES_TRIGGERS:
        each = f"REFERENCING {transitions} FOR EACH STATEMENT" if transitions else "FOR EACH ROW"
        result = "NULL" if transitions else "OLD"  # a row's BEFORE DELETE returns the row
        op.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"{body} RETURN {result}; END $$"
        )
        op.execute(f"CREATE TRIGGER {name} {when} ON {table} {each} EXECUTE FUNCTION {name}()")


def _triggers(sqlite: bool) -> list[tuple[str, str]]:
    """The triggers' names and tables."""
    made = SQLITE_TRIGGERS if sqlite else POSTGRES_TRIGGERS
    return [(name, table) for name, _, table, _, _ in made]


def _count_column() -> sa.Column[int]:
    return sa.Column("n", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False)


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.create_table(
        "job_counts",
        sa.Column("team", TEXT, nullable=False),
        sa.Column("queue", TEXT, nullable=False),
        sa.Column("state", TEXT, nullable=False),
        _count_column(),
        sa.PrimaryKeyConstraint("team", "queue", "state"),
    )
    op.create_table(
        "job_label_counts",
        sa.Column("key", TEXT, nullable=False),
        sa.Column("value", TEXT, nullable=False),
        sa.Column("team", TEXT, nullable=False),
        sa.Column("queue", TEXT, nullable=False),
        sa.Column("state", TEXT, nullable=False),
        _count_column(),
        sa.PrimaryKeyConstraint("key", "value", "team", "queue", "state"),
    )
    op.execute(
        f"INSERT INTO job_counts ({GROUP}, n) SELECT {GROUP}, COUNT(*) FROM jobs GROUP BY {GROUP}"
    )
    op.execute(
        f"INSERT INTO job_label_counts ({LABEL_GROUP}, n) SELECT l.key, l.value, j.team, "
        "j.queue, j.state, COUNT(*) FROM job_labels AS l JOIN jobs AS j ON j.id = l.job_id "
        "GROUP BY l.key, l.value, j.team, j.queue, j.state"
    )
    _create_triggers(sqlite)
    unfinished = sa.text(UNFINISHED)
    op.create_index(
        "ix_jobs_unfinished",
        "jobs",
        ["created_at", "id"],
        sqlite_where=unfinished,
        postgresql_where=unfinished,
    )
    op.create_index(
        "ix_tasks_unfinished",
        "tasks",
        ["job_id"],
        sqlite_where=unfinished,
        postgresql_where=unfinished,
    )


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.drop_index("ix_tasks_unfinished", "tasks")
    op.drop_index("ix_jobs_unfinished", "jobs")
    for name, table in _triggers(sqlite):
        op.execute(f"DROP TRIGGER {name}" + ("" if sqlite else f" ON {table}"))
        if not sqlite:
            op.execute(f"DROP FUNCTION {name}()")
    op.drop_table("job_label_counts")
    op.drop_table("job_counts")
