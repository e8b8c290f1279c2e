"""The counts of jobs the database keeps (revision 0010) are those a count of the rows gives,
whatever wrote the rows; the jobs that have not ended are read from their own index."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.store import queries
from trainfleet.store.connection import Connection
from trainfleet.store.database import SELECT_JOBS, Store
from trainfleet.store.migrate import upgrade
from trainfleet.store.targets import parse_target

MakeJob = Callable[..., JobRecord]
TEAMS, QUEUES = ("ada", "bob", "cy"), ("default", "gpu")
LABELS = ({}, {"batch": "1"}, {"batch": "2"}, {"batch": "1", "env": "prod"}, {"env": "dev"})
FILTERS: list[dict[str, Any]] = [
    {},
    {"teams": ["ada"]},
    {"teams": ["ada", "cy"]},
    {"teams": ["nobody"]},
    {"queue": "gpu"},
    {"teams": ["bob"], "queue": "default"},
    {"labels": {"batch": "1"}},
    {"labels": {"env": "dev"}, "teams": ["cy", "bob"]},
    {"labels": {"batch": "2"}, "queue": "gpu", "teams": ["ada"]},
    {"labels": {"batch": "1", "env": "prod"}},
    {"labels": {"missing": "x"}},
    {"name": "demo"},
    {"user": "u1", "labels": {"batch": "1"}},
]


@contextmanager
def _connection(target: str) -> Iterator[Connection]:
    connection = Connection(parse_target(target))
    try:
        yield connection
    finally:
        connection.close()


def _counted_by_rows(target: str, **filters: Any) -> dict[str, int]:
    """How many jobs match ``filters``, by state, counted from the rows themselves."""
    where, params = queries.job_filter(
        state=None,
        name=filters.get("name"),
        user=filters.get("user"),
        labels=filters.get("labels", {}),
        after=None,
        teams=filters.get("teams"),
        queue=filters.get("queue"),
    )
    with _connection(target) as db:
        rows = db.rows(f"SELECT state, COUNT(*) AS n FROM jobs {where} GROUP BY state", params)
    return {row["state"]: int(row["n"]) for row in rows}


def _assert_counts_right(store: Store, target: str) -> None:
    for filters in FILTERS:
        assert store.find_jobs(**filters).counts == _counted_by_rows(target, **filters), filters
    assert store.count_jobs() == _counted_by_rows(target)
    with _connection(target) as db:
        for table in ("job_counts", "job_label_counts"):
            assert db.rows(f"SELECT n FROM {table} WHERE n <= 0") == []  # none kept at 0


def _job(make_job: MakeJob, n: int, rng: random.Random) -> JobRecord:
    return make_job(
        f"job-{n:03d}",
        created_at=1000.0 + n,
        team=rng.choice(TEAMS),
        queue=rng.choice(QUEUES),
        user=f"u{n % 2}",
        labels=rng.choice(LABELS),
    )


def _task(job_id: str) -> TaskRecord:
    return TaskRecord(job_id=job_id, role="worker", index=0, state=State.QUEUED)


def test_counts_follow_every_write_of_the_store(
    store: Store, target: str, make_job: MakeJob
) -> None:
    rng = random.Random(30)
    ids = []
    for n in range(60):
        job = _job(make_job, n, rng)
        store.add_job(job, [_task(job.id)])
        ids.append(job.id)
    _assert_counts_right(store, target)
    moves = [State.STARTING, State.RUNNING, State.RESTARTING, State.QUEUED, State.SUCCEEDED]
    moves += [State.FAILED, State.CANCELLED]
    for _ in range(150):
        job_id = rng.choice(ids)
        store.transition(job_id, rng.choice(moves), Condition(Code.STARTED, "moved"))
        if rng.random() < 0.2:
            store.transition(job_id, State.RUNNING, Condition(Code.STARTED), task=("worker", 0))
    _assert_counts_right(store, target)
    for job_id in rng.sample(ids, 15):
        assert store.delete_job(job_id)
    store.add_job(make_job("job-000", created_at=5.0, team="bob", labels={"batch": "1"}), [])
    store.update_job("job-001", reason="a reason", code="stopped")
    _assert_counts_right(store, target)


def test_counts_follow_rows_written_by_hand(store: Store, target: str, make_job: MakeJob) -> None:
    """Not the store's writes: a job deleted with its labels left to the foreign key's
    cascade, labels added, changed and removed, a job's team and queue changed."""
    rng = random.Random(31)
    for n in range(20):
        store.add_job(_job(make_job, n, rng), [])
    with _connection(target) as db, db.transaction() as sql:
        sql.execute("DELETE FROM jobs WHERE id IN ('job-003', 'job-004', 'job-005')")
        sql.execute(
            'INSERT INTO job_labels (job_id, "key", "value") '
            "SELECT id, 'env', 'dev' FROM jobs WHERE id IN ('job-006', 'job-007')"
            " AND NOT EXISTS (SELECT 1 FROM job_labels WHERE job_id = jobs.id AND \"key\" = 'env')"
        )
        sql.execute("""UPDATE job_labels SET "value" = 'prod' WHERE job_id = 'job-008' """)
        sql.execute(
            "UPDATE job_labels SET job_id = 'job-010' WHERE job_id = 'job-009'"
            " AND NOT EXISTS (SELECT 1 FROM job_labels WHERE job_id = 'job-010')"
        )
        sql.execute("DELETE FROM job_labels WHERE job_id = 'job-011'")
        sql.execute(
            "UPDATE jobs SET team = 'cy', queue = 'gpu', state = 'failed'"
            " WHERE id IN ('job-012', 'job-013')"
        )
    _assert_counts_right(store, target)


def test_jobs_stored_before_are_counted(target: str, make_job: MakeJob) -> None:
    upgrade(parse_target(target), "0009")
    rng = random.Random(32)
    with _connection(target) as db, db.transaction() as sql:
        for n in range(30):
            job = _job(make_job, n, rng)
            row = job.to_dict(exclude={"labels"}) | {"state": rng.choice(list(State)).value}
            sql.execute(queries.insert("jobs", tuple(row)), row)
            for key, value in job.labels.items():
                sql.execute(
                    queries.insert("job_labels", ("job_id", "key", "value")),
                    {"job_id": job.id, "key": key, "value": value},
                )
    with Store.open(target) as store:
        _assert_counts_right(store, target)


def _plan(target: str, query: str) -> str:
    """How the database reads ``query`` (PostgreSQL: with sequential scans discouraged, as
    a test's few rows would make one the cheapest)."""
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as db:
            db.execute("SET enable_seqscan = off")
            return " | ".join(str(row[0]) for row in db.execute(f"EXPLAIN {query}").fetchall())
    with sqlite3.connect(target) as db:
        return " | ".join(str(row[3]) for row in db.execute(f"EXPLAIN QUERY PLAN {query}"))


def test_unfinished_jobs_are_read_from_their_index_newest_first(
    store: Store, target: str, make_job: MakeJob
) -> None:
    for n, state in enumerate([*State, *State]):
        store.add_job(make_job(f"job-{n:02d}", created_at=float(n // 3), labels={"n": str(n)}), [])
        if state is not State.QUEUED:
            store.transition(f"job-{n:02d}", state, Condition(Code.STARTED))
    unfinished = [job for job in store.list_jobs(limit=100) if not State(job.state).is_final]
    assert store.unfinished_jobs() == unfinished and len(unfinished) == 8
    query = f"{SELECT_JOBS} WHERE {queries.UNFINISHED} ORDER BY created_at DESC, id DESC"
    assert "ix_jobs_unfinished" in _plan(target, query)


def test_lingering_jobs_are_found_from_the_unfinished_tasks_index(
    store: Store, target: str, make_job: MakeJob
) -> None:
    store.add_job(make_job("lingers"), [_task("lingers")])
    store.transition("lingers", State.SUCCEEDED, Condition(Code.SUCCEEDED))
    assert store.lingering() == ["lingers"]
    query = f"SELECT DISTINCT job_id FROM tasks WHERE {queries.UNFINISHED} ORDER BY job_id"
    assert "ix_tasks_unfinished" in _plan(target, query)


@pytest.mark.parametrize("count", [1, 2500])
def test_labels_of_many_jobs_are_read_in_parts(
    tmp_path: Path, make_job: MakeJob, count: int
) -> None:
    with Store.open(tmp_path / "trainfleet.db") as store:
        for n in range(count):
            store.add_job(make_job(f"job-{n:04d}", created_at=float(n), labels={"n": str(n)}), [])
        jobs = store.unfinished_jobs()
    assert [job.labels for job in jobs] == [{"n": str(n)} for n in reversed(range(count))]
