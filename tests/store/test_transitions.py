"""State changes: one transition writes the state, its condition and its event together,
and never leaves a final state; other writes cannot change a state."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import FINAL_STATES, JobRecord, State, TaskRecord
from trainfleet.store import transitions
from trainfleet.store.database import Store

MakeJob = Callable[..., JobRecord]
ENDS = {
    State.SUCCEEDED: Condition(Code.SUCCEEDED, "w/0 succeeded"),
    State.FAILED: Condition(Code.LOST, "lost: the trainfleet process running it ended"),
    State.CANCELLED: Condition(Code.CANCELLED, "cancelled by ada"),
}
AFTER_AN_END = list(itertools.product(sorted(FINAL_STATES), list(State)))


def _job(store: Store, make_job: MakeJob) -> str:
    store.add_job(make_job(), [TaskRecord(job_id="demo-1", role="w", index=0)])
    return "demo-1"


@pytest.mark.parametrize(("final", "then"), AFTER_AN_END)
def test_a_job_never_leaves_a_final_state(
    store: Store, make_job: MakeJob, final: State, then: State
) -> None:
    job_id = _job(store, make_job)
    assert store.transition(job_id, final, ENDS[final], finished_at=5.0)
    events = store.list_events(job_id)

    assert not store.transition(job_id, then, Condition(Code.STARTED, "again"), finished_at=9.0)
    job = store.get_job(job_id)
    assert job is not None and (job.state, job.code, job.reason) == (
        final,
        ENDS[final].code,
        ENDS[final].message,
    )
    assert job.finished_at == 5.0 and store.list_events(job_id) == events


@pytest.mark.parametrize(("final", "then"), AFTER_AN_END)
def test_a_task_never_leaves_a_final_state(
    store: Store, make_job: MakeJob, final: State, then: State
) -> None:
    job_id = _job(store, make_job)
    assert store.transition(job_id, final, ENDS[final], task=("w", 0), exit_code=0)
    events = store.list_events(job_id)

    assert not store.transition(job_id, then, Condition(Code.STARTED), task=("w", 0), exit_code=3)
    task = store.list_tasks(job_id)[0]
    assert (task.state, task.code, task.reason, task.exit_code) == (
        final,
        ENDS[final].code,
        ENDS[final].message,
        0,
    )
    assert store.list_events(job_id) == events


def test_a_missing_job_or_task_is_not_moved(store: Store, make_job: MakeJob) -> None:
    job_id = _job(store, make_job)
    assert not store.transition("nope", State.RUNNING, Condition(Code.STARTED))
    assert not store.transition(job_id, State.RUNNING, Condition(Code.STARTED), task=("x", 0))
    assert store.list_events("nope") == [] and len(store.list_events(job_id)) == 1


def test_the_state_its_condition_and_its_event_are_written_together(
    store: Store, make_job: MakeJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = _job(store, make_job)
    lost = Condition(Code.NODE_LOST, "exited with exit code 137 (a node of n1 failed)")
    assert store.transition(job_id, State.FAILED, lost, task=("w", 0))
    task, event = store.list_tasks(job_id)[0], store.list_events(job_id)[-1]
    assert (task.state, task.code, task.reason) == (State.FAILED, Code.NODE_LOST, lost.message)
    assert (event.task, event.state, event.code, event.message) == (
        "w/0",
        State.FAILED,
        Code.NODE_LOST,
        lost.message,
    )

    def no_event(*args: object) -> None:
        raise RuntimeError("the event could not be written")

    monkeypatch.setattr(transitions, "event", no_event)
    with pytest.raises(RuntimeError, match="could not be written"):
        store.transition(job_id, State.STARTING, Condition(Code.ADMITTED), started_at=1.0)
    job = store.get_job(job_id)
    assert job is not None and (job.state, job.started_at) == (State.QUEUED, None)


def test_update_changes_no_state(store: Store, make_job: MakeJob) -> None:
    job_id = _job(store, make_job)
    with pytest.raises(ValueError, match=r"only through Store\.transition"):
        store.update_job(job_id, state=State.FAILED)
    with pytest.raises(ValueError, match=r"only through Store\.transition"):
        store.update_task(job_id, "w", 0, state=State.FAILED)
    assert store.get_job(job_id).state == State.QUEUED  # type: ignore[union-attr]
    assert store.list_tasks(job_id)[0].state == State.QUEUED


def test_a_job_that_moves_no_longer_waits(store: Store, make_job: MakeJob) -> None:
    store.add_job(
        make_job(waiting_code=Code.WAITING_FOR_ADMISSION, waiting="waiting to be admitted"), []
    )
    quota = Condition(Code.WAITING_FOR_QUOTA, "waiting for quota: queue 'a' is full")
    assert store.note("demo-1", State.QUEUED, quota, waiting=True, event=False)
    job = store.get_job("demo-1")
    assert job is not None and (job.waiting_code, job.waiting) == (quota.code, quota.message)
    assert (job.code, job.reason) == ("", "")  # why it waits is not why it is queued
    assert len(store.list_events("demo-1")) == 1

    assert store.transition("demo-1", State.STARTING, Condition(Code.ADMITTED))
    job = store.get_job("demo-1")
    assert job is not None and (job.code, job.waiting_code, job.waiting) == (Code.ADMITTED, "", "")
    assert not store.note("demo-1", State.QUEUED, quota, waiting=True)  # no longer queued
    assert store.get_job("demo-1").waiting == ""  # type: ignore[union-attr]
    assert [e.code for e in store.list_events("demo-1")] == [Code.SUBMITTED, Code.ADMITTED]


def test_a_note_is_an_event_of_the_state_the_job_is_in(store: Store, make_job: MakeJob) -> None:
    job_id = _job(store, make_job)
    store.transition(job_id, State.STARTING, Condition(Code.ADMITTED))
    building = Condition(Code.WAITING_FOR_ENVIRONMENT, "setup: preparing numpy for w")
    assert store.note(job_id, State.STARTING, building, waiting=True)
    job = store.get_job(job_id)
    assert job is not None and (job.state, job.waiting_code) == (State.STARTING, building.code)
    assert store.list_events(job_id)[-1].code == Code.WAITING_FOR_ENVIRONMENT
    assert not store.note(job_id, State.RUNNING, building)
    assert len(store.list_events(job_id)) == 3


def test_a_preempted_job_queues_its_ended_tasks_again(store: Store, make_job: MakeJob) -> None:
    """They run again when it is admitted again: the one way out of a task's final state."""
    store.add_job(make_job(), [TaskRecord(job_id="demo-1", role="w", index=i) for i in range(2)])
    store.transition("demo-1", State.RUNNING, Condition(Code.STARTED))
    store.transition(
        "demo-1", State.SUCCEEDED, Condition(Code.EXITED, "exit code 0"), task=("w", 0)
    )
    stopped = Condition(Code.PREEMPTED, "exit code 143 (SIGTERM); preempted by b-1")
    store.transition("demo-1", State.QUEUED, stopped, task=("w", 1))

    preempted = Condition(Code.PREEMPTED, "preempted by b-1 (priority 5)")
    assert store.transition("demo-1", State.QUEUED, preempted)
    tasks = store.list_tasks("demo-1")
    assert [(t.state, t.code, t.reason) for t in tasks] == [
        (State.QUEUED, Code.PREEMPTED, preempted.message),
        (State.QUEUED, Code.PREEMPTED, stopped.message),
    ]
    assert [(e.task, e.state, e.code) for e in store.list_events("demo-1")][-2:] == [
        ("", State.QUEUED, Code.PREEMPTED),
        ("w/0", State.QUEUED, Code.PREEMPTED),
    ]


def test_an_unknown_code_still_reads(store: Store, make_job: MakeJob) -> None:
    """A newer trainfleet's code on a shared database: kept as its text."""
    store.add_job(make_job(code="from-the-future"), [])
    assert store.get_job("demo-1").code == "from-the-future"  # type: ignore[union-attr]


def test_a_write_run_again_after_a_lost_link_is_not_written_twice(
    store: Store, make_job: MakeJob
) -> None:
    """A try that lost its link may have committed: its second run writes nothing more
    and reports the change as made."""
    job_id = _job(store, make_job)
    waits = Condition(Code.WAITING_FOR_RESOURCES, "waiting for resources: gpu held by job a-1")
    lost = Condition(Code.LOST, "lost: the trainfleet process running it ended (pid 7)")
    for retried in (False, True):
        with store._db.transaction() as db:
            db.retried = retried
            assert transitions.note(db, job_id, State.QUEUED, waits, waiting=True, recorded=True)
    for retried in (False, True):
        with store._db.transaction() as db:
            db.retried = retried
            assert transitions.transition(db, job_id, State.FAILED, lost, None, {})
    assert [e.code for e in store.list_events(job_id)] == [
        Code.SUBMITTED,
        Code.WAITING_FOR_RESOURCES,
        Code.LOST,
    ]
