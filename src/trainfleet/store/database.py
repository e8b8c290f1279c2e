"""The store: jobs, tasks and events in SQL. Every change is one transaction."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, create_engine, event, insert, select, update
from sqlalchemy.engine import Connection

from trainfleet.store import tables
from trainfleet.store.records import EventRecord, JobRecord, State, TaskRecord


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets `trainfleet list` read while a job writes; NORMAL is durable across app crashes.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class Store:
    """Jobs, their tasks and their events, in SQLite or PostgreSQL."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = create_engine(url)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        tables.metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # -- writes ---------------------------------------------------------------

    def add_job(self, job: JobRecord, job_tasks: Sequence[TaskRecord]) -> None:
        """Store a new job and its tasks, all queued."""
        with self.engine.begin() as conn:
            conn.execute(insert(tables.jobs).values(**job.model_dump()))
            if job_tasks:
                conn.execute(insert(tables.tasks), [task.model_dump() for task in job_tasks])
            _event(conn, job.id, "", job.state, f"submitted by {job.user or 'unknown'}")

    def update_job(self, job_id: str, message: str = "", **fields: Any) -> None:
        """Change a job's fields; a change of ``state`` is recorded as an event."""
        with self.engine.begin() as conn:
            conn.execute(update(tables.jobs).where(tables.jobs.c.id == job_id).values(**fields))
            if "state" in fields:
                _event(conn, job_id, "", fields["state"], message)

    def update_task(
        self, job_id: str, role: str, index: int, message: str = "", **fields: Any
    ) -> None:
        """Change a task's fields; a change of ``state`` is recorded as an event."""
        c = tables.tasks.c
        with self.engine.begin() as conn:
            conn.execute(
                update(tables.tasks)
                .where(c.job_id == job_id, c.role == role, c.index == index)
                .values(**fields)
            )
            if "state" in fields:
                _event(conn, job_id, f"{role}/{index}", fields["state"], message)

    # -- reads ----------------------------------------------------------------

    def get_job(self, job_id: str) -> JobRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(tables.jobs).where(tables.jobs.c.id == job_id)).first()
        return JobRecord.model_validate(row._asdict()) if row else None

    def list_jobs(self, limit: int = 100) -> list[JobRecord]:
        """The newest jobs first."""
        query = select(tables.jobs).order_by(tables.jobs.c.created_at.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [JobRecord.model_validate(row._asdict()) for row in conn.execute(query)]

    def list_tasks(self, job_id: str) -> list[TaskRecord]:
        c = tables.tasks.c
        query = select(tables.tasks).where(c.job_id == job_id)
        with self.engine.connect() as conn:
            rows = [TaskRecord.model_validate(row._asdict()) for row in conn.execute(query)]
        return rows

    def list_events(self, job_id: str, after: int = 0) -> list[EventRecord]:
        """Events of ``job_id`` with an id above ``after``, oldest first."""
        c = tables.events.c
        query = select(tables.events).where(c.job_id == job_id, c.id > after).order_by(c.id)
        with self.engine.connect() as conn:
            return [EventRecord.model_validate(row._asdict()) for row in conn.execute(query)]


def _event(conn: Connection, job_id: str, task: str, state: State | str, message: str) -> None:
    conn.execute(
        insert(tables.events).values(
            job_id=job_id, time=time.time(), task=task, state=str(state), message=message
        )
    )
