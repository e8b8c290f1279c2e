"""The store: jobs, tasks, events, labels, API tokens, accounts and the audit trail, in
SQLite (WAL) or PostgreSQL.

Every change is one transaction, written so that it can run again whole where the database
was lost midway (see ``Connection.write``). The store speaks plain DB-API SQL (sqlite3 or psycopg):
``trainfleet run`` opens it on every start, and a mapper's import alone would cost more than
the rest of the start-up. SQLAlchemy and Alembic are imported only to upgrade the schema.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Any

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import (
    FINAL_STATES,
    EventRecord,
    JobPage,
    JobRecord,
    State,
    TaskRecord,
    TokenRecord,
)
from trainfleet.store import queries, schema, transitions
from trainfleet.store.accounts import Accounts
from trainfleet.store.audit import AuditTrail
from trainfleet.store.connection import Connection, Row, Transaction, patiently
from trainfleet.store.errors import StoreConflict, StoreError, StoreUnavailable
from trainfleet.store.migrate import check_current, ensure_current
from trainfleet.store.paging import decode_cursor, encode_cursor
from trainfleet.store.secrets import SecretStore
from trainfleet.store.targets import Target, parse_target
from trainfleet.store.transitions import Change
from trainfleet.store.workflows import WorkflowStore

__all__ = ["Store", "StoreConflict", "StoreError", "StoreUnavailable", "patiently"]

TASK_KEY = transitions.TASK_KEY
SELECT_JOBS = f"SELECT {queries.columns(schema.JOB_COLUMNS)} FROM jobs"
SELECT_TOKENS = f"SELECT {queries.columns(schema.TOKEN_COLUMNS)} FROM tokens"
NEWEST_FIRST = "ORDER BY created_at DESC, id DESC"
IDS_READ = 1000
"""Jobs whose labels or tasks one query reads (SQLite and PostgreSQL bound a query's
parameters)."""


class Store:
    """Jobs, their tasks and events, and API tokens in one database; safe to share by threads.

    Open one with ``Store.open(path_or_url)``.
    """

    def __init__(self, connection: Connection) -> None:
        self._db = connection
        self.accounts = Accounts(connection)
        """Users, teams and their members."""
        self.secrets = SecretStore(connection)
        """Teams' secrets, encrypted."""
        self.audit = AuditTrail(connection)
        """Who changed what, when, from where; records are only added."""
        self.workflows = WorkflowStore(connection)
        """Workflows, their schedules, runs and steps (a server's)."""
        self._job_ends: list[Callable[[str], object]] = []

    @classmethod
    def open(cls, target: str | os.PathLike[str], read_only: bool = False) -> Store:
        """Open the store at a path (SQLite) or URL, upgrading its schema if it is behind.

        ``target``: ``/path/trainfleet.db``, ``sqlite:///path`` or
        ``postgresql://user:password@host:port/database``. Raises StoreError when the
        database cannot be reached or was written by a newer trainfleet. ``read_only``:
        the database refuses every write made through this store (StoreError); its
        schema must be current already.
        """
        connection = Connection(parse_target(target), read_only=read_only)
        try:
            (check_current if read_only else ensure_current)(connection)
        except BaseException:
            connection.close()
            raise
        return cls(connection)

    @property
    def target(self) -> Target:
        return self._db.target

    def close(self) -> None:
        self._db.close()

    def check(self, wait: float) -> None:
        """Raise StoreUnavailable unless the database answers within about ``wait`` seconds."""
        self._db.rows("SELECT 1 AS ok", wait=wait)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- jobs: writes ---------------------------------------------------------

    def add_job(
        self, job: JobRecord, job_tasks: Sequence[TaskRecord], key: str | None = None
    ) -> None:
        """Store a new job, its labels and its tasks, all queued; ``key``: its submission
        key (see ``job_with_key``), unique.

        StoreConflict when a job with that id, or that key, exists (nothing is stored
        then). A try that lost the database while committing is not stored twice.
        """
        self.add_jobs([(job, job_tasks)], {job.id: key} if key is not None else {})

    def add_jobs(
        self,
        new: Sequence[tuple[JobRecord, Sequence[TaskRecord]]],
        keys: Mapping[str, str] | None = None,
    ) -> None:
        """Store new jobs as ``add_job`` does, in one transaction: all or none of them
        (StoreConflict where one's id or key is taken); ``keys``: submission keys by job id."""
        keys = keys or {}

        def add(db: Transaction) -> None:
            ids = {"id": new[0][0].id}
            if db.retried and db.rows("SELECT id FROM jobs WHERE id = :id", ids):
                return  # the try that lost its link had committed
            jobs = [job for job, _ in new]
            # A job of this id deleted before left its `deleted` event: the new one starts afresh.
            db.execute_many("DELETE FROM events WHERE job_id = :id", [{"id": j.id} for j in jobs])
            db.execute_many(
                queries.insert("jobs", (*schema.JOB_COLUMNS, "submission_key")),
                [
                    {**job.to_dict(exclude={"labels"}), "submission_key": keys.get(job.id)}
                    for job in jobs
                ],
            )
            db.execute_many(
                queries.insert("job_labels", ("job_id", "key", "value")),
                [{"job_id": j.id, "key": k, "value": v} for j in jobs for k, v in j.labels.items()],
            )
            db.execute_many(
                queries.insert("tasks", (*schema.TASK_COLUMNS, "position")),
                [
                    {**task.to_dict(), "position": n}
                    for _, job_tasks in new
                    for n, task in enumerate(job_tasks)
                ],
            )
            for job in jobs:
                submitted = Condition(Code.SUBMITTED, f"submitted by {job.user or 'unknown'}")
                transitions.event(db, job.id, "", job.state, submitted, job.team)

        self._db.write(add)

    def transition(
        self,
        job_id: str,
        state: State,
        condition: Condition,
        *,
        task: tuple[str, int] | None = None,
        **fields: Any,
    ) -> bool:
        """Move the job (or, with ``task=(role, index)``, that task of it) to ``state`` for
        ``condition``, with ``fields`` (``finished_at``, ``pid``...), and record the event,
        in one transaction: the only way a state changes.

        Returns False, writing nothing, where the job or task is in a final state (a final
        state is never left; the first end wins) or does not exist. A job's move clears why
        it waited; a job moved back to ``queued`` (preempted) takes its ended tasks back to
        ``queued`` with it: they all run again when it is admitted.
        """
        return self.transitions(job_id, [Change(state, condition, task, fields)])[0]

    def transitions(self, job_id: str, changes: Sequence[Change]) -> list[bool]:
        """Several of the job's changes (``transition``'s), in their order and in one
        transaction; whether each was made."""

        def write(db: Transaction) -> list[bool]:
            return [
                transitions.transition(db, job_id, c.state, c.condition, c.task, c.fields)
                for c in changes
            ]

        made = self._db.write(write)
        if any(
            m and c.task is None and c.state.is_final for m, c in zip(made, changes, strict=True)
        ):
            self._job_ended(job_id)
        return made

    def on_job_end(self, listener: Callable[[str], object]) -> None:
        """Call ``listener(job_id)`` after each job's end (or deletion) this store writes;
        it runs on the writer's thread, so it must be quick."""
        self._job_ends.append(listener)

    def off_job_end(self, listener: Callable[[str], object]) -> None:
        if listener in self._job_ends:
            self._job_ends.remove(listener)

    def _job_ended(self, job_id: str) -> None:
        for listener in list(self._job_ends):
            listener(job_id)

    def note(
        self,
        job_id: str,
        state: State,
        condition: Condition,
        *,
        waiting: bool = False,
        event: bool = True,
    ) -> bool:
        """While the job is in ``state`` (and only then: False otherwise), record
        ``condition`` without a change of state: as an event, and with ``waiting`` as why
        the job waits (``waiting_code``, ``waiting``)."""
        return self._db.write(
            lambda db: transitions.note(db, job_id, state, condition, waiting, event)
        )

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Change a job's fields other than its state (see ``transition``)."""
        self._update("jobs", "id = :job_id", schema.JOB_COLUMNS, {"job_id": job_id}, fields)

    def update_task(self, job_id: str, role: str, index: int, **fields: Any) -> None:
        """Change a task's fields other than its state (see ``transition``)."""
        key = {"job_id": job_id, "role": role, "index": index}
        self._update("tasks", TASK_KEY, schema.TASK_COLUMNS, key, fields)

    def _update(
        self,
        table: str,
        which: str,
        allowed: Sequence[str],
        key: dict[str, Any],
        fields: dict[str, Any],
    ) -> None:
        if "state" in fields:
            raise ValueError("a state changes only through Store.transition")
        if fields:
            sets = queries.assignments(fields, allowed)
            query = f"UPDATE {table} SET {sets} WHERE {which}"
            self._db.write(lambda db: db.execute(query, {**fields, **key}))

    def place_tasks(self, places: Mapping[str, Mapping[tuple[str, int], tuple[str, str]]]) -> None:
        """Record where each job's tasks run, ``{job_id: {(role, index): (address, gpus)}}``,
        in one transaction (an admission pass places hundreds of jobs at once)."""
        rows = [
            {"job_id": job_id, "role": role, "index": index, "address": address, "gpus": gpus}
            for job_id, tasks in places.items()
            for (role, index), (address, gpus) in tasks.items()
        ]
        self._db.write(
            lambda db: db.execute_many(
                f"UPDATE tasks SET address = :address, gpus = :gpus WHERE {TASK_KEY}", rows
            )
        )

    def delete_job(self, job_id: str) -> bool:
        """Forget a job with its tasks, events and labels; False if there was no such job.

        One event is left of it, its last: ``deleted`` (with its team and last state), for
        the readers of every job's events (``changes``) to learn of it."""
        key = {"job_id": job_id}

        def delete(db: Transaction) -> bool:
            jobs = db.rows("SELECT state, team FROM jobs WHERE id = :job_id", key)
            for table in ("events", "tasks", "job_labels"):
                db.execute(f"DELETE FROM {table} WHERE job_id = :job_id", key)
            if not jobs:
                return db.retried
            db.execute("DELETE FROM jobs WHERE id = :job_id", key)
            deleted = Condition(Code.DELETED, "deleted")
            state = State(jobs[0]["state"])
            transitions.event(db, job_id, "", state, deleted, team=str(jobs[0]["team"]))
            return True

        deleted = self._db.write(delete)
        if deleted:
            self._job_ended(job_id)
        return deleted

    # -- jobs: reads ----------------------------------------------------------

    def get_job(self, job_id: str) -> JobRecord | None:
        rows = self._db.rows(f"{SELECT_JOBS} WHERE id = :id", {"id": job_id})
        return self._jobs(rows)[0] if rows else None

    def job_with_key(self, key: str) -> JobRecord | None:
        """The job stored with submission key ``key`` (see ``add_job``), if any."""
        rows = self._db.rows(f"{SELECT_JOBS} WHERE submission_key = :key", {"key": key})
        return self._jobs(rows)[0] if rows else None

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Each of ``job_ids`` that exists, by id, in one query per ``IDS_READ`` jobs."""
        found: dict[str, JobRecord] = {}
        for start in range(0, len(job_ids), IDS_READ):  # a query's parameters are bounded
            listed, params = queries.in_list("id", list(job_ids[start : start + IDS_READ]))
            rows = self._db.rows(f"{SELECT_JOBS} WHERE id IN {listed}", params)
            found.update((job.id, job) for job in self._jobs(rows))
        return found

    def list_jobs(self, limit: int = 100) -> list[JobRecord]:
        """The newest jobs first."""
        return self._jobs(
            self._db.rows(f"{SELECT_JOBS} {NEWEST_FIRST} LIMIT :limit", {"limit": limit})
        )

    def find_jobs(
        self,
        *,
        state: str | None = None,
        name: str | None = None,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        teams: Collection[str] | None = None,
        queue: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of the jobs that match every filter given, newest first, with how many
        match every filter but ``state``, by state.

        ``name`` and ``queue`` match exactly; every ``labels`` pair must match; ``teams``:
        only jobs of these teams (None: of every team). Pass the page's
        ``next_cursor`` as ``cursor`` for the next page: pages neither repeat nor skip a job,
        whatever is submitted meanwhile. ValueError for a bad cursor or a limit below 1.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        after = decode_cursor(cursor) if cursor is not None else None
        if teams is not None and not teams:
            return JobPage(jobs=[])
        filtered = functools.partial(
            queries.job_filter, name=name, user=user, queue=queue, labels=labels or {}, teams=teams
        )
        where, params = filtered(state=state, after=after)
        rows = self._db.rows(
            f"{SELECT_JOBS} {where} {NEWEST_FIRST} LIMIT :limit", {**params, "limit": limit + 1}
        )
        jobs = self._jobs(rows[:limit])
        more = len(rows) > limit
        last = jobs[-1] if jobs else None
        next_cursor = encode_cursor(last.created_at, last.id) if more and last else None
        counted = queries.counted(
            name=name, user=user, labels=labels or {}, teams=teams, queue=queue
        )
        if counted is None:  # filters the kept counts do not cover: count the rows
            where, params = filtered(state=None, after=None)
            counted = f"SELECT state, COUNT(*) AS n FROM jobs {where} GROUP BY state", params
        return JobPage(jobs=jobs, next_cursor=next_cursor, counts=self._counts(*counted))

    def unfinished_jobs(self) -> list[JobRecord]:
        """Every job that has not ended (queued, starting, running, restarting), newest
        first as in ``list_jobs``: read from an index of those alone, however many ended
        jobs are stored."""
        return self._jobs(self._db.rows(f"{SELECT_JOBS} WHERE {queries.UNFINISHED} {NEWEST_FIRST}"))

    def list_tasks(self, job_id: str) -> list[TaskRecord]:
        """The tasks of a job in the order they were stored (role order, then index)."""
        rows = self._db.rows(
            f"SELECT {queries.columns(schema.TASK_COLUMNS)} FROM tasks "
            'WHERE job_id = :id ORDER BY position, role, "index"',
            {"id": job_id},
        )
        return [TaskRecord.from_row(row) for row in rows]

    def tasks_of(self, job_ids: Sequence[str]) -> dict[str, list[TaskRecord]]:
        """The tasks of each of ``job_ids`` (as ``list_tasks``), in one query per
        ``IDS_READ`` jobs: a job that does not exist is left out."""
        found: dict[str, list[TaskRecord]] = {}
        for start in range(0, len(job_ids), IDS_READ):  # a query's parameters are bounded
            listed, params = queries.in_list("job", list(job_ids[start : start + IDS_READ]))
            rows = self._db.rows(
                f"SELECT {queries.columns(schema.TASK_COLUMNS)} FROM tasks "
                f'WHERE job_id IN {listed} ORDER BY job_id, position, role, "index"',
                params,
            )
            for row in rows:
                task = TaskRecord.from_row(row)
                found.setdefault(task.job_id, []).append(task)
        return found

    def lingering(self) -> list[str]:
        """Ended jobs with a task that has not ended (a TensorBoard in its ``keep_after``,
        when the process that ran it stopped), in one query."""
        ended = sorted(state.value for state in FINAL_STATES)
        jobs, params = queries.in_list("ended", ended)
        rows = self._db.rows(  # the tasks that have not ended, from their index alone
            f"SELECT DISTINCT job_id AS id FROM tasks WHERE {queries.UNFINISHED} "
            f"AND job_id IN (SELECT id FROM jobs WHERE state IN {jobs}) ORDER BY job_id",
            params,
        )
        return [str(row["id"]) for row in rows]

    def list_events(self, job_id: str, after: int = 0) -> list[EventRecord]:
        """Events of ``job_id`` with an id above ``after``, oldest first."""
        rows = self._db.rows(
            f"SELECT {queries.columns(schema.EVENT_COLUMNS)} FROM events "
            "WHERE job_id = :id AND id > :after ORDER BY id",
            {"id": job_id, "after": after},
        )
        return [EventRecord.from_row(row) for row in rows]

    def events_of(
        self, job_ids: Sequence[str], states: Collection[State], codes: Collection[Code]
    ) -> dict[str, list[EventRecord]]:
        """The events of each of ``job_ids`` in one of ``states`` or with one of ``codes``,
        oldest first, in one query per ``IDS_READ`` jobs: a job with none is left out."""
        found: dict[str, list[EventRecord]] = {}
        wanted, wanted_params = [], {}
        for column, values in (("state", states), ("code", codes)):
            if values:
                listed, params = queries.in_list(column, sorted(value.value for value in values))
                wanted.append(f"{column} IN {listed}")
                wanted_params.update(params)
        for start in range(0, len(job_ids), IDS_READ) if wanted else ():  # bounded parameters
            listed, params = queries.in_list("job", list(job_ids[start : start + IDS_READ]))
            rows = self._db.rows(
                f"SELECT {queries.columns(schema.EVENT_COLUMNS)} FROM events "
                f"WHERE job_id IN {listed} AND ({' OR '.join(wanted)}) ORDER BY id",
                {**params, **wanted_params},
            )
            for row in rows:
                event = EventRecord.from_row(row)
                found.setdefault(event.job_id, []).append(event)
        return found

    def changes(self, after: int, limit: int) -> list[EventRecord]:
        """Events of every job with an id above ``after``, oldest first, at most ``limit``:
        ids grow in the order of the commits, so no event read later has a lower id."""
        rows = self._db.rows(
            f"SELECT {queries.columns(schema.EVENT_COLUMNS)} FROM events "
            "WHERE id > :after ORDER BY id LIMIT :limit",
            {"after": after, "limit": limit},
        )
        return [EventRecord.from_row(row) for row in rows]

    def newest_event(self) -> int:
        """The id of the newest event (0 where there is none)."""
        return int(self._db.rows("SELECT COALESCE(MAX(id), 0) AS n FROM events")[0]["n"])

    def count_jobs(self) -> dict[str, int]:
        """How many jobs are in each state (states with none are left out)."""
        return self._counts(
            "SELECT state, SUM(n) AS n FROM job_counts GROUP BY state HAVING SUM(n) > 0"
        )

    def count_tasks(self) -> dict[str, int]:
        """How many tasks, of all jobs, are in each state."""
        return self._counts("SELECT state, COUNT(*) AS n FROM tasks GROUP BY state")

    def count_restarts(self) -> int:
        """The restarts of every stored task, added up."""
        return int(self._db.rows("SELECT COALESCE(SUM(restarts), 0) AS n FROM tasks")[0]["n"])

    def _counts(self, query: str, params: dict[str, Any] | None = None) -> dict[str, int]:
        return {str(row["state"]): int(row["n"]) for row in self._db.rows(query, params)}

    def _jobs(self, rows: list[Row]) -> list[JobRecord]:
        """Job rows as records, each with its labels (one more query for them all)."""
        labels: dict[str, dict[str, str]] = {}
        job_ids = [str(row["id"]) for row in rows]
        for start in range(0, len(job_ids), IDS_READ):  # a query's parameters are bounded
            ids, params = queries.in_list("job", job_ids[start : start + IDS_READ])
            query = f'SELECT job_id, "key", "value" FROM job_labels WHERE job_id IN {ids}'
            for label in self._db.rows(query, params):
                labels.setdefault(label["job_id"], {})[label["key"]] = label["value"]
        return [JobRecord.from_row({**row, "labels": labels.get(row["id"], {})}) for row in rows]

    # -- queues ---------------------------------------------------------------

    def put_queue(self, name: str, config: str, team: str = "default") -> None:
        """Create or replace a queue's configuration (JSON); ``team`` owns a new queue (an
        existing one keeps its team)."""
        self._db.write(
            lambda db: db.execute(
                "INSERT INTO queues (name, config, updated_at, team) VALUES (:name, :config, "
                ":updated_at, :team) ON CONFLICT (name) DO UPDATE SET config = excluded.config, "
                "updated_at = excluded.updated_at",
                {"name": name, "config": config, "updated_at": time.time(), "team": team},
            )
        )

    def list_queues(self) -> dict[str, str]:
        """Every stored queue's configuration (JSON), by name."""
        rows = self._db.rows("SELECT name, config FROM queues ORDER BY name")
        return {row["name"]: row["config"] for row in rows}

    # -- API tokens -----------------------------------------------------------

    def add_token(self, token: TokenRecord) -> None:
        """Store a token (its digest only); StoreConflict if its id or digest is taken, or
        its user has an unrevoked token of that name."""

        def add(db: Transaction) -> None:
            if db.retried and db.rows("SELECT id FROM tokens WHERE id = :id", {"id": token.id}):
                return  # the try that lost its link had committed
            taken = db.rows(
                'SELECT id FROM tokens WHERE "user" = :user AND name = :name '
                "AND revoked_at IS NULL",
                {"user": token.user, "name": token.name},
            )
            if taken:
                raise StoreConflict(f"user {token.user!r} has a token named {token.name!r} already")
            db.execute(queries.insert("tokens", schema.TOKEN_COLUMNS), token.to_dict())

        self._db.write(add)

    def get_token(self, token_id: str) -> TokenRecord | None:
        """The token with this id, revoked or not."""
        rows = self._db.rows(f"{SELECT_TOKENS} WHERE id = :id", {"id": token_id})
        return TokenRecord.from_row(rows[0]) if rows else None

    def token_by_digest(self, digest: str) -> TokenRecord | None:
        """The token with this digest, revoked or not (see ``TokenRecord.revoked``)."""
        rows = self._db.rows(f"{SELECT_TOKENS} WHERE digest = :digest", {"digest": digest})
        return TokenRecord.from_row(rows[0]) if rows else None

    def list_tokens(self, user: str | None = None) -> list[TokenRecord]:
        """Every token (of ``user``, if given), revoked ones included, oldest first."""
        where = 'WHERE "user" = :user' if user is not None else ""
        rows = self._db.rows(f"{SELECT_TOKENS} {where} ORDER BY created_at, id", {"user": user})
        return [TokenRecord.from_row(row) for row in rows]

    def revoke_token(self, token_id: str) -> bool:
        """Revoke an active token; False if there is no such token or it was revoked already.

        A revoked token stays listed, with the time of its (first) revocation.
        """
        now = time.time()

        def revoke(db: Transaction) -> bool:
            if db.retried:  # the try that lost its link may have revoked it
                query = "SELECT id FROM tokens WHERE id = :id AND revoked_at = :now"
                if db.rows(query, {"id": token_id, "now": now}):
                    return True
            changed = db.execute(
                "UPDATE tokens SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL",
                {"now": now, "id": token_id},
            )
            return changed > 0

        return self._db.write(revoke)
