"""The store: jobs, tasks and events in SQLite (WAL). Every change is one transaction.

It speaks plain DB-API SQL through the standard library: ``trainfleet run`` opens it on
every start, and a mapper's import alone would cost more than the rest of the start-up.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainfleet.store import schema
from trainfleet.store.records import EventRecord, JobRecord, State, TaskRecord

TASK_KEY = 'job_id = :job_id AND role = :role AND "index" = :index'


class StoreError(RuntimeError):
    """The database cannot be used (unreadable, or written by a newer trainfleet)."""


class Store:
    """Jobs, their tasks and their events in one SQLite file; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(
            path, timeout=30, isolation_level=None, check_same_thread=False
        )
        self._connection.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        # WAL lets `trainfleet list` read while a job writes; NORMAL stays durable across
        # crashes of the application (only a power loss may drop the last commits).
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA synchronous=NORMAL")
        self._connection.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    def _migrate(self) -> None:
        version = self._connection.execute("PRAGMA user_version").fetchone()[0]
        if version > schema.VERSION:
            raise StoreError(f"the store was written by a newer trainfleet (schema {version})")
        if version < schema.VERSION:
            with self._transaction() as db:
                for statement in schema.TABLES.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {schema.VERSION}")

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                yield self._connection
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
            self._connection.execute("COMMIT")

    def _read(self, query: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        with self._lock:
            return self._connection.execute(query, params).fetchall()

    # -- writes ---------------------------------------------------------------

    def add_job(self, job: JobRecord, job_tasks: Sequence[TaskRecord]) -> None:
        """Store a new job and its tasks, all queued."""
        with self._transaction() as db:
            db.execute(_insert("jobs", schema.JOB_COLUMNS), job.model_dump())
            db.executemany(
                _insert("tasks", schema.TASK_COLUMNS), [task.model_dump() for task in job_tasks]
            )
            _event(db, job.id, "", job.state, f"submitted by {job.user or 'unknown'}")

    def update_job(self, job_id: str, message: str = "", **fields: Any) -> None:
        """Change a job's fields; a change of ``state`` is recorded as an event."""
        with self._transaction() as db:
            db.execute(
                f"UPDATE jobs SET {_assignments(fields)} WHERE id = :job_id",
                {**fields, "job_id": job_id},
            )
            if "state" in fields:
                _event(db, job_id, "", fields["state"], message)

    def update_task(
        self, job_id: str, role: str, index: int, message: str = "", **fields: Any
    ) -> None:
        """Change a task's fields; a change of ``state`` is recorded as an event."""
        key = {"job_id": job_id, "role": role, "index": index}
        with self._transaction() as db:
            db.execute(
                f"UPDATE tasks SET {_assignments(fields)} WHERE {TASK_KEY}", {**fields, **key}
            )
            if "state" in fields:
                _event(db, job_id, f"{role}/{index}", fields["state"], message)

    # -- reads ----------------------------------------------------------------

    def get_job(self, job_id: str) -> JobRecord | None:
        rows = self._read("SELECT * FROM jobs WHERE id = :id", {"id": job_id})
        return JobRecord.model_validate(dict(rows[0])) if rows else None

    def list_jobs(self, limit: int = 100) -> list[JobRecord]:
        """The newest jobs first."""
        rows = self._read(
            "SELECT * FROM jobs ORDER BY created_at DESC LIMIT :limit", {"limit": limit}
        )
        return [JobRecord.model_validate(dict(row)) for row in rows]

    def list_tasks(self, job_id: str) -> list[TaskRecord]:
        """The tasks of a job in the order they were stored (role order, then index)."""
        rows = self._read("SELECT * FROM tasks WHERE job_id = :id ORDER BY rowid", {"id": job_id})
        return [TaskRecord.model_validate(dict(row)) for row in rows]

    def list_events(self, job_id: str, after: int = 0) -> list[EventRecord]:
        """Events of ``job_id`` with an id above ``after``, oldest first."""
        rows = self._read(
            "SELECT * FROM events WHERE job_id = :id AND id > :after ORDER BY id",
            {"id": job_id, "after": after},
        )
        return [EventRecord.model_validate(dict(row)) for row in rows]


def _insert(table: str, columns: Sequence[str]) -> str:
    names = ", ".join(f'"{column}"' for column in columns)
    values = ", ".join(f":{column}" for column in columns)
    return f"INSERT INTO {table} ({names}) VALUES ({values})"


def _assignments(fields: dict[str, Any]) -> str:
    allowed = set(schema.JOB_COLUMNS) | set(schema.TASK_COLUMNS)
    unknown = set(fields) - allowed
    if unknown:  # column names are spliced into SQL: only known ones may pass
        raise ValueError(f"unknown column(s): {', '.join(sorted(unknown))}")
    return ", ".join(f'"{name}" = :{name}' for name in fields)


def _event(
    db: sqlite3.Connection, job_id: str, task: str, state: State | str, message: str
) -> None:
    db.execute(
        "INSERT INTO events (job_id, time, task, state, message) "
        "VALUES (:job_id, :time, :task, :state, :message)",
        {
            "job_id": job_id,
            "time": time.time(),
            "task": task,
            "state": str(state),
            "message": message,
        },
    )
