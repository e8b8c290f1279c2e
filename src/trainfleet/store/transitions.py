"""The one way a job's or a task's state changes: its condition and its event with it.

Each change is one guarded UPDATE in one transaction with its event, so a reader never
sees a state without the event that explains it, and a final state (succeeded, failed,
cancelled) is never left: the UPDATE matches no row then, and nothing is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from trainfleet.domain.conditions import Condition
from trainfleet.domain.records import FINAL_STATES, State
from trainfleet.store import queries, schema
from trainfleet.store.connection import Transaction


@dataclass(frozen=True)
class Change:
    """One change of a job's state (``task``: of that task of it), with the fields that go
    with it (``finished_at``, ``pid``...); see ``transition``."""

    state: State
    condition: Condition
    task: tuple[str, int] | None = None
    fields: dict[str, Any] = field(default_factory=dict)


TASK_KEY = 'job_id = :job_id AND role = :role AND "index" = :index'
NOT_FINAL = "state NOT IN (" + ", ".join(f"'{state.value}'" for state in FINAL_STATES) + ")"


def transition(
    db: Transaction,
    job_id: str,
    state: State,
    condition: Condition,
    task: tuple[str, int] | None,
    fields: dict[str, Any],
) -> bool:
    """Write the job's (or its ``task``'s) new state, its condition and its event; False,
    with nothing written, where it is in a final state or does not exist."""
    values = {
        **fields,
        "state": state.value,
        "code": condition.code.value,
        "reason": condition.message,
    }
    if task is None:
        values.update(waiting_code="", waiting="")  # a job that moves waits for nothing
        sets = queries.assignments(values, schema.JOB_COLUMNS)
        table, which, name = "jobs", "id = :job_id", ""
        key: dict[str, Any] = {"job_id": job_id}
    else:
        sets = queries.assignments(values, schema.TASK_COLUMNS)
        key = {"job_id": job_id, "role": task[0], "index": task[1]}
        table, which, name = "tasks", TASK_KEY, f"{task[0]}/{task[1]}"
    query = f"UPDATE {table} SET {sets} WHERE {which} AND {NOT_FINAL}"
    if db.execute(query, {**values, **key}) == 0:
        # The try that lost its link may have committed this very change.
        return db.retried and _written(db, table, which, key, values)
    event(db, job_id, name, state, condition)
    if task is None and state is State.QUEUED:
        _requeue_tasks(db, job_id, condition)
    return True


def _written(
    db: Transaction, table: str, which: str, key: dict[str, Any], values: dict[str, Any]
) -> bool:
    rows = db.rows(f"SELECT state, code, reason FROM {table} WHERE {which}", key)
    return bool(rows) and all(rows[0][name] == values[name] for name in ("state", "code", "reason"))


def _requeue_tasks(db: Transaction, job_id: str, condition: Condition) -> None:
    """A job back in the queue (preempted) runs every task again when it is admitted:
    the tasks that had ended in its last run are queued with it (the only way a task
    leaves a final state, and only while its job has not ended)."""
    ended = db.rows(
        f'SELECT role, "index" FROM tasks WHERE job_id = :job_id AND NOT ({NOT_FINAL})',
        {"job_id": job_id},
    )
    for row in ended:
        key = {"job_id": job_id, "role": row["role"], "index": row["index"]}
        db.execute(
            f"UPDATE tasks SET state = :state, code = :code, reason = :reason WHERE {TASK_KEY}",
            {
                **key,
                "state": State.QUEUED.value,
                "code": condition.code.value,
                "reason": condition.message,
            },
        )
        event(db, job_id, f"{row['role']}/{row['index']}", State.QUEUED, condition)


def note(
    db: Transaction,
    job_id: str,
    state: State,
    condition: Condition,
    waiting: bool,
    recorded: bool,
) -> bool:
    """While the job is in ``state``: with ``waiting``, store ``condition`` as why it waits;
    with ``recorded``, add it as an event. False, with nothing written, otherwise."""
    key = {"job_id": job_id, "state": state.value}
    if waiting:
        changed = db.execute(
            "UPDATE jobs SET waiting_code = :code, waiting = :message "
            "WHERE id = :job_id AND state = :state",
            {**key, "code": condition.code.value, "message": condition.message},
        )
    else:
        changed = len(db.rows("SELECT id FROM jobs WHERE id = :job_id AND state = :state", key))
    if changed and recorded and not (db.retried and _last_event_is(db, job_id, condition)):
        event(db, job_id, "", state, condition)
    return changed > 0


def _last_event_is(db: Transaction, job_id: str, condition: Condition) -> bool:
    """Whether the job's newest event says ``condition`` (the try that lost its link may
    have written it)."""
    rows = db.rows(
        "SELECT code, message FROM events WHERE job_id = :job_id ORDER BY id DESC LIMIT 1",
        {"job_id": job_id},
    )
    return bool(rows) and (rows[0]["code"], rows[0]["message"]) == (
        condition.code.value,
        condition.message,
    )


def event(
    db: Transaction,
    job_id: str,
    task: str,
    state: State,
    condition: Condition,
    team: str | None = None,
) -> None:
    """Add an event of the job (its ``team``: the job's, read here where not given).

    Events are numbered in the order their transactions commit (``Transaction.in_order``):
    a reader of every event after a given id (the change feed) never misses one that
    commits later with a lower id."""
    db.in_order()
    db.execute(
        "INSERT INTO events (job_id, time, task, state, code, message, team) "
        "VALUES (:job_id, :time, :task, :state, :code, :message, "
        + (
            ":team)"
            if team is not None
            else "COALESCE((SELECT team FROM jobs WHERE id = :job_id), ''))"
        ),
        {
            "job_id": job_id,
            "time": time.time(),
            "task": task,
            "state": state.value,
            "code": condition.code.value,
            "message": condition.message,
            "team": team,
        },
    )
