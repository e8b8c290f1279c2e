"""The codes a job, its tasks and its events carry through a real run, and why it waits
kept apart from why it ended."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code
from trainfleet.domain.records import Reason, State
from trainfleet.spec.models import JobSpec


def _spec(text: str) -> JobSpec:
    return JobSpec.model_validate(yaml.safe_load(text))


def _job_codes(engine: Engine, job_id: str) -> list[tuple[str, str]]:
    return [(e.state, e.code) for e in engine.events(job_id) if not e.task]


def test_a_job_that_succeeds(engine: Engine, tmp_path: Path) -> None:
    job = engine.submit(_spec("name: ok\nroles:\n  worker: {command: 'true'}\n"), tmp_path)
    assert (job.code, job.reason) == (Code.SUBMITTED, "")
    assert (job.waiting_code, job.waiting) == (Code.WAITING_FOR_ADMISSION, "waiting to be admitted")
    assert [(t.state, t.code) for t in engine.tasks(job.id)] == [(State.QUEUED, Code.SUBMITTED)]

    engine.start(job.id)
    ended = engine.wait(job.id, timeout=30)
    assert (ended.state, ended.code, ended.reason) == (
        State.SUCCEEDED,
        Code.SUCCEEDED,
        "worker/0 succeeded",
    )
    assert (ended.waiting_code, ended.waiting) == ("", "")
    assert [(t.code, t.reason) for t in engine.tasks(job.id)] == [(Code.EXITED, "exit code 0")]
    assert _job_codes(engine, job.id) == [
        (State.QUEUED, Code.SUBMITTED),
        (State.STARTING, Code.ADMITTED),
        (State.RUNNING, Code.STARTED),
        (State.SUCCEEDED, Code.SUCCEEDED),
    ]
    assert [e.code for e in engine.events(job.id) if e.task] == [Code.STARTED, Code.EXITED]


def test_a_job_failed_by_a_task_takes_its_code_and_restarts_say_so(
    engine: Engine, tmp_path: Path
) -> None:
    spec = _spec(
        "name: bad\nrestart: {policy: on-failure, max_restarts: 1, backoff: {initial: 0}}\n"
        "roles:\n  worker: {command: 'exit 3'}\n"
    )
    job = engine.submit(spec, tmp_path, start=True)
    ended = engine.wait(job.id, timeout=30)
    assert (ended.state, ended.code) == (State.FAILED, Code.EXITED)
    assert ended.reason == "worker/0 exited with exit code 3 after 1 restart(s)"
    task_codes = [(e.state, e.code) for e in engine.events(job.id) if e.task]
    assert task_codes == [
        (State.RUNNING, Code.STARTED),
        (State.RESTARTING, Code.PROGRAM_FAILED),
        (State.RUNNING, Code.STARTED),
        (State.FAILED, Code.EXITED),
    ]
    (restart,) = [e for e in engine.events(job.id) if e.state == State.RESTARTING]
    assert re.fullmatch(r"exit code 3 on \S+ \(pid \d+\); restarting in 0s", restart.message)


def test_a_cancelled_job_no_longer_waits_and_stays_cancelled(
    engine: Engine, tmp_path: Path
) -> None:
    job = engine.submit(_spec("name: never\nroles:\n  worker: {command: 'true'}\n"), tmp_path)
    cancelled = engine.cancel(job.id, "no longer needed")
    assert (cancelled.state, cancelled.code, cancelled.reason) == (
        State.CANCELLED,
        Code.CANCELLED,
        "no longer needed",
    )
    assert (cancelled.waiting_code, cancelled.waiting) == ("", "")
    assert [(t.code, t.reason) for t in engine.tasks(job.id)] == [
        (Code.NOT_STARTED, "not started: no longer needed")
    ]
    events = engine.events(job.id)
    late = Reason.LOST.condition("the trainfleet process running it ended (pid 1)")
    engine._end_unstarted(job.id, State.FAILED, late)  # a second end, as a race could write
    assert engine.get(job.id) == cancelled and engine.events(job.id) == events
