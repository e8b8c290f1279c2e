"""What the change feed reads of the store: every job's events by id, in commit order, each
with its job's team; a deleted job's last event; the job list's queue and team filters and
its counts; revision 0008 on old rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from alembic import command
from test_migrations import _alembic_config, _execute

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.store import transitions
from trainfleet.store.database import Store
from trainfleet.store.migrate import upgrade
from trainfleet.store.targets import parse_target

MakeJob = Callable[..., JobRecord]
STARTED = Condition(Code.STARTED, "started")


def _task(job_id: str) -> list[TaskRecord]:
    return [TaskRecord(job_id=job_id, role="w", index=0)]


def test_changes_are_every_jobs_events_with_their_team(store: Store, make_job: MakeJob) -> None:
    store.add_job(make_job("a-1", team="vision"), _task("a-1"))
    store.add_job(make_job("b-1", team="audio"), _task("b-1"))
    store.transition("a-1", State.RUNNING, STARTED, task=("w", 0))
    changes = store.changes(after=0, limit=100)
    assert [(e.job_id, e.team, e.task, e.code) for e in changes] == [
        ("a-1", "vision", "", Code.SUBMITTED),
        ("b-1", "audio", "", Code.SUBMITTED),
        ("a-1", "vision", "w/0", Code.STARTED),
    ]
    assert store.newest_event() == changes[-1].id
    assert store.changes(after=changes[0].id, limit=1) == changes[1:2]
    store.delete_job("b-1")
    (deleted,) = store.changes(after=changes[-1].id, limit=100)
    assert (deleted.job_id, deleted.team, deleted.code) == ("b-1", "audio", Code.DELETED)


def test_ids_follow_the_order_of_the_commits(target: str, make_job: MakeJob) -> None:
    """A transaction that added an event and commits late holds back the others' events
    (PostgreSQL's ids come from a sequence as rows are inserted): a reader that goes on
    after the last id it read misses none."""
    with Store.open(target) as first, Store.open(target) as second:
        for n in range(2):
            first.add_job(make_job(f"j-{n}"), _task(f"j-{n}"))
        start = first.newest_event()
        inside = threading.Event()

        def slow(db: object) -> None:
            transitions.event(db, "j-0", "", State.QUEUED, Condition(Code.SUBMITTED, "slow"))  # type: ignore[arg-type]
            inside.set()
            time.sleep(0.5)

        writer = threading.Thread(target=lambda: first._db.write(slow))
        writer.start()
        assert inside.wait(10)
        later = threading.Thread(
            target=lambda: second.transition("j-1", State.RUNNING, STARTED, task=("w", 0))
        )
        later.start()
        read: list[int] = []
        while writer.is_alive() or later.is_alive():
            read += [e.id for e in second.changes(read[-1] if read else start, 100)]
            time.sleep(0.01)
        writer.join()
        later.join()
        read += [e.id for e in second.changes(read[-1] if read else start, 100)]
        assert read == [e.id for e in second.changes(start, 100)] and len(read) == 2


def test_the_list_filters_by_queue_and_team_and_counts_states(
    store: Store, make_job: MakeJob
) -> None:
    for n, (team, queue) in enumerate((("a", "q1"), ("a", "q2"), ("b", "q1"), ("a", "q1"))):
        store.add_job(make_job(f"j-{n}", team=team, queue=queue, created_at=n), _task(f"j-{n}"))
    store.transition("j-3", State.RUNNING, STARTED)
    page = store.find_jobs(queue="q1", teams=["a"], limit=1)
    assert [job.id for job in page.jobs] == ["j-3"] and page.next_cursor is not None
    assert page.counts == {"queued": 1, "running": 1}
    rest = store.find_jobs(queue="q1", teams=["a"], limit=1, cursor=page.next_cursor)
    assert [job.id for job in rest.jobs] == ["j-0"] and rest.counts == page.counts
    assert store.find_jobs(queue="q1", state="running").counts == {"queued": 2, "running": 1}
    assert store.find_jobs(queue="none").counts == {}
    assert store.get_job("j-1").queue == "q2"  # type: ignore[union-attr]


def test_revision_0008_gives_old_events_their_team_and_old_jobs_their_queue(
    target: str,
) -> None:
    upgrade(parse_target(target), "0007")
    job = (
        'INSERT INTO jobs (id, name, framework, state, spec, source, workdir, "user", team, '
        "created_at) VALUES ('{}', 'old', 'generic', 'queued', '{}', 'trainfleet', '/tmp', "
        "'ada', '{}', 1)"
    )
    _execute(
        target,
        job.format("q-1", '{"queue": "gpu"}', "vision"),
        job.format("d-1", "{}", "audio"),
        job.format("x-1", "{}", "audio"),
        "INSERT INTO events (job_id, time, task, state, message, code) VALUES "
        "('q-1', 1.0, '', 'queued', 'submitted', 'submitted'), "
        "('d-1', 2.0, '', 'queued', 'submitted', 'submitted'), "
        "('x-1', 3.0, '', 'queued', 'submitted', 'submitted')",
        "DELETE FROM events WHERE job_id = 'x-1'",  # the newest id is gone, not to be reused
    )
    with Store.open(target) as store:
        assert {e.job_id: e.team for e in store.changes(0, 100)} == {
            "q-1": "vision",
            "d-1": "audio",
        }
        assert store.get_job("q-1").queue == "gpu"  # type: ignore[union-attr]
        assert store.get_job("d-1").queue == "default"  # type: ignore[union-attr]
        store.transition("d-1", State.RUNNING, STARTED)
        assert store.newest_event() == 4
        store.delete_job("q-1")  # its event outlives it: no foreign key holds it back
        assert store.changes(4, 10)[0].code == Code.DELETED
    command.downgrade(_alembic_config(target), "0007")
    with Store.open(target) as store:
        assert [e.job_id for e in store.changes(0, 100)] == ["d-1", "d-1"]
