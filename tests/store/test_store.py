"""The store on SQLite and PostgreSQL: round trips, one transaction per change, deletes."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.store import database
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreConflict, StoreError
from trainfleet.store.transitions import Change

MakeJob = Callable[..., JobRecord]
STARTED = Condition(Code.STARTED)


def _tasks(job_id: str, *names: str) -> list[TaskRecord]:
    return [
        TaskRecord(job_id=job_id, role=name.split("/")[0], index=int(name.split("/")[1]))
        for name in names
    ]


def test_job_tasks_and_events_round_trip(store: Store, make_job: MakeJob) -> None:
    job = make_job(labels={"team": "vision", "env": "prod"}, user="ada")
    store.add_job(
        job, [TaskRecord(job_id=job.id, role="worker", index=i, address=f"h:{i}") for i in range(2)]
    )
    started = Condition(Code.STARTED, "started, pid 42")
    assert store.transition(job.id, State.RUNNING, started, task=("worker", 1), pid=42)
    assert store.transition(job.id, State.RUNNING, STARTED, started_at=job.created_at + 1.5)

    assert store.get_job(job.id) == dataclasses.replace(
        job, state=State.RUNNING, code=Code.STARTED, started_at=job.created_at + 1.5
    )
    tasks = {t.name: t for t in store.list_tasks(job.id)}
    assert tasks["worker/1"].pid == 42 and tasks["worker/1"].state == State.RUNNING
    assert (tasks["worker/1"].code, tasks["worker/1"].reason) == (Code.STARTED, "started, pid 42")
    assert tasks["worker/0"] == TaskRecord(job_id=job.id, role="worker", index=0, address="h:0")
    events = store.list_events(job.id)
    assert [(e.task, e.state, e.code, e.message) for e in events] == [
        ("", "queued", Code.SUBMITTED, "submitted by ada"),
        ("worker/1", "running", Code.STARTED, "started, pid 42"),
        ("", "running", Code.STARTED, ""),
    ]
    assert store.list_events(job.id, after=events[1].id) == events[2:]
    assert store.get_job("nope") is None
    assert store.list_tasks("nope") == [] and store.list_events("nope") == []


def test_many_jobs_are_read_and_placed_at_once(store: Store, make_job: MakeJob) -> None:
    """``get_jobs`` reads those of the ids that exist (with their labels), past the bound
    of one query's parameters; ``place_tasks`` places the tasks of several jobs at once."""
    for n in range(3):
        store.add_job(make_job(f"j-{n}", labels={"n": str(n)}), _tasks(f"j-{n}", "w/0", "w/1"))
    ids = ["j-0", "nope", "j-2", *(f"missing-{n}" for n in range(database.IDS_READ))]
    found = store.get_jobs(ids)
    assert sorted(found) == ["j-0", "j-2"]
    assert found["j-2"] == store.get_job("j-2") and found["j-2"].labels == {"n": "2"}
    store.place_tasks({"j-0": {("w", 1): ("h:1", "0,1")}, "j-2": {("w", 0): ("h:2", "")}})
    placed = {
        (job, task.name): (task.address, task.gpus)
        for job in ("j-0", "j-1", "j-2")
        for task in store.list_tasks(job)
    }
    assert placed[("j-0", "w/1")] == ("h:1", "0,1") and placed[("j-2", "w/0")] == ("h:2", "")
    assert placed[("j-0", "w/0")] == placed[("j-1", "w/0")] == ("", "")


def test_jobs_stored_together_are_stored_whole_or_not_at_all(
    store: Store, make_job: MakeJob
) -> None:
    """``add_jobs`` stores several jobs (labels, tasks, a ``submitted`` event each) in one
    transaction; where one id is taken, none of them is stored."""
    store.add_jobs(
        [
            (make_job("a-1", labels={"n": "1"}), _tasks("a-1", "w/0", "w/1")),
            (make_job("b-1", team="blue"), _tasks("b-1", "chief/0")),
        ]
    )
    assert store.get_job("a-1").labels == {"n": "1"}  # type: ignore[union-attr]
    assert [t.name for t in store.list_tasks("a-1")] == ["w/0", "w/1"]
    events = store.list_events("b-1")
    assert [(e.state, e.team) for e in events] == [("queued", "blue")]
    with pytest.raises(StoreConflict):
        store.add_jobs([(make_job("c-1"), _tasks("c-1", "w/0")), (make_job("a-1"), [])])
    assert store.get_job("c-1") is None and store.list_events("c-1") == []
    assert len(store.list_tasks("a-1")) == 2


def test_changes_of_a_job_and_its_tasks_are_written_together(
    store: Store, make_job: MakeJob
) -> None:
    """``transitions`` makes several changes in one transaction, in their order, saying
    which were made (a task already ended is not moved), and tells the job's end once."""
    store.add_job(make_job(), _tasks("demo-1", "w/0", "w/1"))
    store.transition("demo-1", State.FAILED, Condition(Code.EXITED, "exit 1"), task=("w", 1))
    ended: list[str] = []
    store.on_job_end(ended.append)
    made = store.transitions(
        "demo-1",
        [
            Change(State.RUNNING, Condition(Code.STARTED), ("w", 0), {"pid": 42}),
            Change(State.RUNNING, Condition(Code.STARTED), ("w", 1)),
            Change(State.FAILED, Condition(Code.FAILED, "w/1 failed")),
        ],
    )
    assert made == [True, False, True] and ended == ["demo-1"]
    tasks = {task.name: (task.state, task.pid) for task in store.list_tasks("demo-1")}
    assert tasks == {"w/0": ("running", 42), "w/1": ("failed", None)}
    events = [(e.task, e.state) for e in store.list_events("demo-1")]
    assert events[-2:] == [("w/0", "running"), ("", "failed")]


def test_fields_without_state_change_record_no_event(store: Store, make_job: MakeJob) -> None:
    store.add_job(make_job(), _tasks("demo-1", "w/0"))
    store.update_job("demo-1", reason="waiting")
    store.update_task("demo-1", "w", 0, exit_code=None, restarts=2)
    assert store.get_job("demo-1").reason == "waiting"  # type: ignore[union-attr]
    assert store.list_tasks("demo-1")[0].restarts == 2
    assert len(store.list_events("demo-1")) == 1


def test_tasks_come_back_in_the_order_they_were_stored(store: Store, make_job: MakeJob) -> None:
    names = ["worker/0", "worker/1", "ps/0", "chief/0", "worker/2"]
    store.add_job(make_job(), _tasks("demo-1", *names))
    assert [t.name for t in store.list_tasks("demo-1")] == names


def test_tasks_of_several_jobs_in_one_read(store: Store, make_job: MakeJob) -> None:
    names = ["worker/0", "ps/0", "worker/1"]
    store.add_job(make_job("a-1"), _tasks("a-1", *names))
    store.add_job(make_job("b-1"), _tasks("b-1", "chief/0"))
    found = store.tasks_of(["a-1", "b-1", "gone-1"])
    assert {job: [t.name for t in tasks] for job, tasks in found.items()} == {
        "a-1": names,
        "b-1": ["chief/0"],
    }
    assert store.tasks_of([]) == {}


def test_tasks_of_many_jobs_reads_what_each_jobs_own_read_does(
    store: Store, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume reads every unfinished job's tasks at once, over several queries."""
    monkeypatch.setattr(database, "IDS_READ", 2)  # five jobs: three queries
    for n in range(5):
        job_id = f"j{n}-1"
        store.add_job(make_job(job_id), _tasks(job_id, *(f"w/{i}" for i in range(n % 3 + 1))))
        store.transition(job_id, State.RUNNING, STARTED, task=("w", 0), pid=n, address=f"h:{n}")
    job_ids = [f"j{n}-1" for n in range(5)]
    assert store.tasks_of(job_ids) == {job_id: store.list_tasks(job_id) for job_id in job_ids}


def test_events_of_many_jobs_are_those_of_each_jobs_own_read_that_match(
    store: Store, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume reads the events that count restarts of every job at once."""
    monkeypatch.setattr(database, "IDS_READ", 2)
    restarting = Condition(Code.PROGRAM_FAILED, "exit code 1")
    for n in range(5):
        job_id = f"j{n}-1"
        store.add_job(make_job(job_id), _tasks(job_id, "w/0"))
        for _ in range(n % 3):
            store.transition(job_id, State.RUNNING, STARTED, task=("w", 0))
            store.transition(job_id, State.RESTARTING, restarting, task=("w", 0))
        store.note(job_id, State.QUEUED, Condition(Code.REGROUPED, "2 of 4"))
    states, codes = {State.RESTARTING}, {Code.REGROUPED}
    job_ids = [f"j{n}-1" for n in range(5)]
    expected = {
        job_id: [e for e in store.list_events(job_id) if e.state in states or e.code in codes]
        for job_id in job_ids
    }
    assert store.events_of([*job_ids, "gone-1"], states, codes) == expected
    assert [len(events) for events in expected.values()] == [1, 2, 3, 1, 2]
    assert store.events_of(job_ids, set(), set()) == {}


def test_lingering_jobs_are_ended_jobs_with_a_task_still_running(
    store: Store, make_job: MakeJob
) -> None:
    ended, started = Condition(Code.EXITED, ""), Condition(Code.STARTED, "")
    for job_id in ("ended-1", "lingers-1", "runs-1"):
        store.add_job(make_job(job_id), _tasks(job_id, "worker/0", "tensorboard/0"))
        store.transition(job_id, State.SUCCEEDED, ended, task=("worker", 0))
        store.transition(job_id, State.RUNNING, started, task=("tensorboard", 0))
    store.transition("ended-1", State.CANCELLED, ended, task=("tensorboard", 0))
    store.transition("ended-1", State.SUCCEEDED, ended)
    store.transition("lingers-1", State.FAILED, ended)
    assert store.lingering() == ["lingers-1"]


def test_a_second_store_on_the_same_database_sees_the_jobs(target: str, make_job: MakeJob) -> None:
    with Store.open(target) as first:
        first.add_job(make_job("a-1", created_at=1.0), [])
    with Store.open(target) as second:
        second.add_job(make_job("b-1", created_at=2.0), [])
    with Store.open(target) as third:
        assert [job.id for job in third.list_jobs()] == ["b-1", "a-1"]


def test_duplicate_job_id_is_refused_and_nothing_is_lost(store: Store, make_job: MakeJob) -> None:
    store.add_job(make_job(), _tasks("demo-1", "w/0"))
    with pytest.raises(StoreConflict, match="already stored"):
        store.add_job(make_job(name="other", labels={"a": "b"}), _tasks("demo-1", "w/0", "w/1"))
    assert [job.name for job in store.list_jobs()] == ["demo"]
    assert store.get_job("demo-1").labels == {}  # type: ignore[union-attr]
    assert len(store.list_tasks("demo-1")) == 1 and len(store.list_events("demo-1")) == 1


def test_a_submission_key_is_stored_once_and_finds_its_job(store: Store, make_job: MakeJob) -> None:
    """A job's submission key is unique (a submission sent again finds its first job);
    jobs without one never conflict; a deleted job frees its key."""
    store.add_job(make_job("a-1"), _tasks("a-1", "w/0"), key="k1")
    store.add_jobs([(make_job("b-1"), []), (make_job("c-1"), [])])  # no keys: no conflict
    with pytest.raises(StoreConflict):
        store.add_jobs([(make_job("d-1"), []), (make_job("e-1"), [])], {"e-1": "k1"})
    assert store.get_job("d-1") is None and store.get_job("e-1") is None
    found = store.job_with_key("k1")
    assert found is not None and found.id == "a-1"
    assert store.job_with_key("k2") is None
    store.transition("a-1", State.CANCELLED, Condition(Code.CANCELLED, "done"))
    store.delete_job("a-1")
    store.add_job(make_job("f-1"), [], key="k1")
    assert store.job_with_key("k1").id == "f-1"  # type: ignore[union-attr]


def test_a_failed_transaction_stores_nothing(store: Store, make_job: MakeJob) -> None:
    # The job row and its labels go in first; the second, duplicate task then fails.
    with pytest.raises(StoreConflict):
        store.add_job(make_job(labels={"team": "a"}), _tasks("demo-1", "w/0", "w/0"))
    assert store.get_job("demo-1") is None
    assert store.list_tasks("demo-1") == [] and store.list_events("demo-1") == []
    assert store.find_jobs(labels={"team": "a"}).jobs == []
    # The store is still usable, and the same job can now be stored whole.
    store.add_job(make_job(labels={"team": "a"}), _tasks("demo-1", "w/0"))
    assert store.get_job("demo-1").labels == {"team": "a"}  # type: ignore[union-attr]


def test_an_error_inside_a_transaction_rolls_back_every_statement(
    store: Store, make_job: MakeJob
) -> None:
    store.add_job(make_job(), [])
    with pytest.raises(RuntimeError, match="boom"), store._db.transaction() as db:
        db.execute("UPDATE jobs SET reason = 'half done' WHERE id = 'demo-1'")
        raise RuntimeError("boom")
    assert store.get_job("demo-1").reason == ""  # type: ignore[union-attr]


def test_unknown_columns_are_refused_before_anything_is_written(
    store: Store, make_job: MakeJob
) -> None:
    store.add_job(make_job(), _tasks("demo-1", "w/0"))
    with pytest.raises(ValueError, match="unknown column"):
        store.update_job("demo-1", reason="x", nope=1)
    with pytest.raises(ValueError, match="unknown column"):
        store.update_task("demo-1", "w", 0, reason="x", name="x")  # a job column
    with pytest.raises(ValueError, match="unknown column"):
        store.transition("demo-1", State.FAILED, Condition(Code.FAILED), nope=1)
    assert store.get_job("demo-1").state == State.QUEUED  # type: ignore[union-attr]
    assert store.get_job("demo-1").reason == ""  # type: ignore[union-attr]
    assert len(store.list_events("demo-1")) == 1


def test_delete_job_takes_its_tasks_events_and_labels_along(
    store: Store, make_job: MakeJob
) -> None:
    store.add_job(make_job("keep-1", labels={"team": "a"}), _tasks("keep-1", "w/0"))
    store.add_job(make_job(labels={"team": "a", "x": "y"}), _tasks("demo-1", "w/0", "w/1"))
    store.transition("demo-1", State.RUNNING, STARTED, task=("w", 0))

    assert store.delete_job("demo-1") is True
    assert store.get_job("demo-1") is None
    assert store.list_tasks("demo-1") == []
    # One event is left, for the readers of every job's changes: its deletion.
    (deleted,) = store.list_events("demo-1")
    assert (deleted.code, deleted.state, deleted.team) == (Code.DELETED, State.QUEUED, "default")
    assert store.changes(after=0, limit=100)[-1] == deleted
    assert [job.id for job in store.find_jobs(labels={"team": "a"}).jobs] == ["keep-1"]
    assert store.delete_job("demo-1") is False
    # Nothing of it lingers: the same id, tasks and labels can be stored afresh.
    store.add_job(make_job(labels={"team": "a", "x": "y"}), _tasks("demo-1", "w/0", "w/1"))
    assert [e.state for e in store.list_events("demo-1")] == ["queued"]
    # The other job is untouched.
    assert len(store.list_tasks("keep-1")) == 1 and len(store.list_events("keep-1")) == 1


def test_two_stores_write_at_once_and_lose_nothing(target: str, make_job: MakeJob) -> None:
    stores = [Store.open(target), Store.open(target)]
    errors: list[BaseException] = []

    def write(store: Store, prefix: str) -> None:
        try:
            for n in range(40):
                job_id = f"{prefix}-{n}"
                store.add_job(make_job(job_id), _tasks(job_id, "w/0", "w/1"))
                store.transition(job_id, State.RUNNING, STARTED, task=("w", 0))
                store.transition(job_id, State.RUNNING, STARTED)
        except BaseException as error:
            errors.append(error)

    threads = [
        threading.Thread(target=write, args=(store, prefix))
        for store, prefix in zip(stores, ("a", "b"), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    reader = stores[0]
    jobs = reader.list_jobs(limit=1000)
    assert len(jobs) == 80 and all(job.state == State.RUNNING for job in jobs)
    event_ids = [e.id for job in jobs for e in reader.list_events(job.id)]
    assert len(event_ids) == 80 * 3 == len(set(event_ids))
    for store in stores:
        store.close()


def test_sqlite_store_uses_wal(tmp_path: Path, make_job: MakeJob) -> None:
    path = tmp_path / "trainfleet.db"
    with Store.open(f"sqlite:///{path}") as store:
        store.add_job(make_job(), [])
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_file_that_is_no_database_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "trainfleet.db"
    path.write_bytes(b"not a database, just some bytes " * 100)
    with pytest.raises(StoreError, match="cannot open the store"):
        Store.open(path)


def test_an_unreachable_postgres_gives_a_clear_error_without_the_password() -> None:
    with pytest.raises(StoreError, match="cannot connect") as caught:
        Store.open("postgresql://someone:s3cret@127.0.0.1:1/nothing")
    assert "s3cret" not in str(caught.value) and "***" in str(caught.value)


def test_a_lost_postgres_connection_is_opened_again(postgres_url: str, make_job: MakeJob) -> None:
    import psycopg

    with Store.open(postgres_url) as store:
        store.add_job(make_job(), [])
        for use in (store.get_job, lambda job_id: store.update_job(job_id, reason="again")):
            backend = store._db._connection.info.backend_pid
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [backend])
            use("demo-1")
            assert store._db._connection.info.backend_pid != backend
        assert store.get_job("demo-1").reason == "again"  # type: ignore[union-attr]


def test_counts_by_state_and_restarts(store: Store, make_job: MakeJob) -> None:
    assert (store.count_jobs(), store.count_tasks(), store.count_restarts()) == ({}, {}, 0)
    store.add_job(make_job("a-1"), _tasks("a-1", "w/0", "w/1"))
    store.add_job(make_job("b-1"), _tasks("b-1", "w/0"))
    store.transition("b-1", State.RUNNING, STARTED)
    store.transition("b-1", State.RUNNING, STARTED, task=("w", 0), restarts=2)
    store.update_task("a-1", "w", 1, restarts=1)
    assert store.count_jobs() == {"queued": 1, "running": 1}
    assert store.count_tasks() == {"queued": 2, "running": 1}
    assert store.count_restarts() == 3


def test_a_read_only_store_reads_what_others_write_and_refuses_every_write(
    target: str, make_job: Callable[..., JobRecord]
) -> None:
    """A server's API process reads through such a store: a write it was not meant to
    make (every write is the engine's process's) fails instead of contending for the
    database's lock."""
    with Store.open(target) as writer, Store.open(target, read_only=True) as reader:
        writer.add_job(make_job("kept-1"), [])
        assert reader.get_job("kept-1") is not None
        with pytest.raises(StoreError):
            reader.add_job(make_job("refused-1"), [])
        with pytest.raises(StoreError):
            reader.transition("kept-1", State.CANCELLED, Condition(Code.CANCELLED, "no"))
        assert writer.get_job("refused-1") is None
        assert writer.get_job("kept-1").state == State.QUEUED
