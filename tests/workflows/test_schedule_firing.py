"""Schedules fired against a real store (SQLite and PostgreSQL) and engine, the clock
moved by the test (a fake clock only: the runs' jobs are real): which missed times run or
are skipped (``catch_up``), one run per time however often and by however many firers it
is looked at, ``concurrency``, an owner disabled, and a schedule whose runs fail firing
on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest
from helpers import fresh_postgres_database, wait_for

from trainfleet.control.access import Caller
from trainfleet.control.assembly import engine_at
from trainfleet.control.services.bundle import Services
from trainfleet.control.services.workflows import Workflows
from trainfleet.domain.records import TeamRole
from trainfleet.domain.workflow_records import RunCode, RunRecord, RunState, ScheduleCode
from trainfleet.workflows.firing import ScheduleFiring

HOUR = 3600.0
OWNER = Caller("ana", teams={"default": TeamRole.MEMBER})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def workflows(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workflows]:
    with _database(request.param) as database:
        yield from _workflows(tmp_path, database)


def _database(kind: str) -> AbstractContextManager[str | None]:
    return fresh_postgres_database() if kind == "postgresql" else nullcontext(None)


def _workflows(tmp_path: Path, database: str | None) -> Iterator[Workflows]:
    engine = engine_at(tmp_path / "data", database, vault=True)
    services = Services.of(engine)
    services.accounts.bootstrap(None)
    from server.harness import add_user

    add_user(engine.store, "ana", "default")
    services.workflows.start()
    try:
        yield services.workflows
    finally:
        services.shutdown()


def _flow(catch_up: str = "last", command: str = "true", **schedule: object) -> str:
    extra = "".join(f", {key}: {value}" for key, value in schedule.items())
    return (
        "kind: Workflow\nname: hourly\n"
        f"schedule: {{cron: '0 * * * *', catch_up: {catch_up}{extra}}}\n"
        f"steps:\n  a: {{job: {{roles: {{worker: {{command: {command!r}}}}}}}}}\n"
    )


def _stored(workflows: Workflows, text: str) -> tuple[str, float]:
    """The workflow stored, its schedule's latest time set to an hour's start; both."""
    submitted = workflows.submit(OWNER, "default", text, "flow.yaml", None, {})
    assert submitted.run is None and len(submitted.next_times) == 5
    start = time.time() // HOUR * HOUR
    workflows.store.set_schedule(submitted.workflow.id, last_time=start)
    return submitted.workflow.id, start


def _firing(workflows: Workflows, now: float) -> tuple[ScheduleFiring, Clock]:
    assert workflows.driver is not None
    clock = Clock(now)
    return ScheduleFiring(workflows.engine.store, workflows.driver, clock, thread=False), clock


def _runs(workflows: Workflows, workflow_id: str) -> list[RunRecord]:
    return sorted(workflows.store.runs(workflow_id, 1000), key=lambda run: run.number)


def _ended(workflows: Workflows, workflow_id: str) -> list[RunRecord]:
    def ended() -> bool:
        return all(RunState(run.state).is_final for run in _runs(workflows, workflow_id))

    wait_for(ended, 60, "every run to end")
    return _runs(workflows, workflow_id)


@pytest.mark.parametrize(
    ("catch_up", "ran", "skipped"),
    [("last", [3], [1, 2]), ("none", [], [1, 2, 3]), ("all", [2, 3], [1])],
)
def test_times_missed_run_or_are_skipped_as_catch_up_says(
    workflows: Workflows, catch_up: str, ran: list[int], skipped: list[int]
) -> None:
    workflow_id, start = _stored(workflows, _flow(catch_up, max_catch_up=2))
    firing, _ = _firing(workflows, start + 3.5 * HOUR)  # 3 times missed, none on time
    next_time = firing.tick()
    assert next_time == start + 4 * HOUR
    runs = _ended(workflows, workflow_id)
    assert [run.scheduled_for for run in runs] == [start + n * HOUR for n in (1, 2, 3)]
    hours = {int((run.scheduled_for or 0) - start) // 3600: run for run in runs}
    assert sorted(h for h, run in hours.items() if run.state == RunState.SKIPPED) == skipped
    for hour in skipped:
        assert hours[hour].code == RunCode.MISSED, hours[hour]
    for hour in ran:
        assert (hours[hour].state, hours[hour].code) == (RunState.SUCCEEDED, RunCode.SUCCEEDED)
    assert workflows.store.schedule(workflow_id).last_time == start + 3 * HOUR  # type: ignore[union-attr]


def test_a_time_is_run_once_however_often_and_by_however_many_it_is_fired(
    workflows: Workflows,
) -> None:
    """Two firers (two servers of one store) each tick twice at the same time."""
    workflow_id, start = _stored(workflows, _flow())
    first, _ = _firing(workflows, start + HOUR + 1)
    second, _ = _firing(workflows, start + HOUR + 1)
    for firing in (first, second, first, second):
        firing.tick()
    runs = _ended(workflows, workflow_id)
    assert [(run.number, run.scheduled_for, run.code) for run in runs] == [
        (1, start + HOUR, RunCode.SUCCEEDED)
    ]
    # Stored before the firer moved the schedule on (a kill -9 between): still one run.
    workflows.store.set_schedule(workflow_id, last_time=start)
    third, _ = _firing(workflows, start + HOUR + 2)
    third.tick()
    assert len(_runs(workflows, workflow_id)) == 1


def test_an_on_time_run_is_scheduled_a_late_one_caught_up(workflows: Workflows) -> None:
    workflow_id, start = _stored(workflows, _flow())
    firing, clock = _firing(workflows, start + HOUR + 5)
    firing.tick()
    clock.now = start + 2 * HOUR + 600  # ten minutes late
    firing.tick()
    runs = _ended(workflows, workflow_id)
    assert [run.state for run in runs] == [RunState.SUCCEEDED] * 2
    assert [run.trigger for run in runs] == [RunCode.SCHEDULED, RunCode.CAUGHT_UP]


def test_forbid_skips_a_time_while_a_run_runs_and_replace_stops_it(workflows: Workflows) -> None:
    workflow_id, start = _stored(workflows, _flow(command="sleep 60", concurrency="forbid"))
    firing, clock = _firing(workflows, start + HOUR + 1)
    firing.tick()
    wait_for(lambda: workflows.store.active_runs(workflow_id)[0].state == "running", 30, "a run")
    clock.now = start + 2 * HOUR + 1
    firing.tick()
    runs = _runs(workflows, workflow_id)
    assert (runs[1].state, runs[1].code) == (RunState.SKIPPED, RunCode.CONCURRENT)
    assert runs[0].id in runs[1].reason
    # The same workflow sent again with `replace`: the running run stops for the next.
    workflows.submit(
        OWNER, "default", _flow(command="sleep 60", concurrency="replace"), "f", None, {}
    )
    clock.now = start + 3 * HOUR + 1
    firing.wake()
    firing.tick()
    runs = _runs(workflows, workflow_id)
    assert (runs[0].state, runs[0].code) == (RunState.CANCELLED, RunCode.REPLACED)
    assert runs[2].state in (RunState.WAITING, RunState.RUNNING)
    job = workflows.store.steps(runs[0].id)[0].job_id
    assert job is not None
    wait_for(lambda: workflows.engine.get(job).state == "cancelled", 30, "the job to stop")
    assert workflows.stop(runs[2], "test").run.state == RunState.CANCELLED


def test_a_disabled_owner_pauses_the_schedule_and_failing_runs_fire_on(
    workflows: Workflows,
) -> None:
    workflow_id, start = _stored(workflows, _flow(command="false"))
    firing, clock = _firing(workflows, start + HOUR + 1)
    firing.tick()
    clock.now = start + 2 * HOUR + 1
    firing.tick()
    runs = _ended(workflows, workflow_id)
    assert [(run.state, run.code) for run in runs] == [(RunState.FAILED, RunCode.STEP_FAILED)] * 2
    workflows.engine.store.accounts.disable_user("ana")
    clock.now = start + 3 * HOUR + 1
    firing.tick()
    schedule = workflows.store.schedule(workflow_id)
    assert schedule is not None and schedule.code == ScheduleCode.OWNER_DISABLED
    assert "ana is disabled" in schedule.reason
    assert len(_runs(workflows, workflow_id)) == 2
