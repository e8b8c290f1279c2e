"""The engine's service functions with real processes: start, wait, cancel, delete."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from helpers import process_group_alive, wait_for

from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobActive, JobNotFound, JobRecord, State
from trainfleet.spec.models import JobSpec
from trainfleet.store.transitions import Change


def _spec(text: str) -> JobSpec:
    return JobSpec.model_validate(yaml.safe_load(text))


SLEEPERS = _spec(
    "name: sleepers\ngrace_period: 1\nroles:\n  worker: {replicas: 2, command: sleep 600}\n"
)


def test_start_and_wait_runs_a_job_in_the_background(engine: Engine, tmp_path: Path) -> None:
    job = engine.submit(
        _spec("name: quick\nroles:\n  worker: {command: echo done}\n"), tmp_path, user="ada"
    )
    assert job.user == "ada" and job.state == State.QUEUED
    engine.start(job.id)
    ended = engine.wait(job.id, timeout=30)
    assert ended.state == State.SUCCEEDED
    assert engine.log_path(job.id, "worker", 0).read_text() == "done\n"


def test_cancel_stops_a_running_job_and_every_process(engine: Engine, tmp_path: Path) -> None:
    job = engine.submit(SLEEPERS, tmp_path)
    engine.start(job.id)
    wait_for(
        lambda: all(t.state == State.RUNNING for t in engine.tasks(job.id)), what="tasks running"
    )
    engine.cancel(job.id, "no longer needed")
    ended = engine.wait(job.id, timeout=30)
    assert ended.state == State.CANCELLED and ended.reason == "no longer needed"
    assert ended.code == Code.CANCELLED
    for task in engine.tasks(job.id):
        assert task.state == State.CANCELLED
        assert task.pid is not None and not process_group_alive(task.pid)


def test_cancel_of_a_queued_job_means_it_never_starts(engine: Engine, tmp_path: Path) -> None:
    job = engine.submit(SLEEPERS, tmp_path)
    cancelled = engine.cancel(job.id)
    assert cancelled.state == State.CANCELLED and cancelled.finished_at is not None
    assert all(t.state == State.CANCELLED and t.pid is None for t in engine.tasks(job.id))
    assert engine.cancel(job.id).state == State.CANCELLED, "cancelling an ended job changes nothing"


def test_a_job_another_process_runs_cannot_be_cancelled_here(
    engine: Engine, tmp_path: Path
) -> None:
    job = engine.submit(SLEEPERS, tmp_path)
    started = Condition(Code.STARTED)
    engine.store.transition(job.id, State.RUNNING, started)  # as another `trainfleet run` would
    with pytest.raises(JobActive, match="another trainfleet process"):
        engine.cancel(job.id)
    with pytest.raises(JobNotFound):
        engine.cancel("no-such-job")


def test_resume_requeues_waiting_jobs_and_leaves_other_processes_jobs(
    engine: Engine, tmp_path: Path
) -> None:
    """A restarted server requeues what waited; a job another process runs is not its own."""
    waiting = engine.submit(_spec("name: later\nroles:\n  worker: {command: 'true'}\n"), tmp_path)
    elsewhere = engine.submit(SLEEPERS, tmp_path)
    started = Condition(Code.STARTED)
    engine.store.transition(elsewhere.id, State.RUNNING, started)  # as another `trainfleet run`
    assert engine.resume() == []
    assert engine.wait(waiting.id, timeout=30).state == State.SUCCEEDED
    assert engine.get(elsewhere.id).state == State.RUNNING
    assert elsewhere.id not in engine.runner.running()
    assert all(task.pid is None for task in engine.tasks(elsewhere.id))


def test_while_a_resume_is_expected_no_job_is_stored_or_stopped_before_it_reads(
    engine: Engine, tmp_path: Path
) -> None:
    """A server serves while it resumes. A job stored before the resume read the stored
    jobs was queued by its submission and by the resume, and ran twice (seen in CI: a
    workflow's step killed by its twin); a cancel could act on a job not picked up yet."""
    left = engine.submit(SLEEPERS, tmp_path)  # queued when the last server was killed
    engine.expect_resume()
    quick = _spec("name: quick\nroles:\n  worker: {command: 'true'}\n")
    submitted: list[JobRecord] = []
    cancelled: list[JobRecord] = []
    calls = [
        threading.Thread(target=lambda: submitted.append(engine.submit(quick, None, start=True))),
        threading.Thread(target=lambda: cancelled.append(engine.cancel(left.id))),
    ]
    for call in calls:
        call.start()
    soon = engine.submit_soon(quick, None)
    time.sleep(0.5)
    assert all(call.is_alive() for call in calls) and not soon.done()
    assert [job.id for job in engine.store.list_jobs()] == [left.id]

    assert engine.resume_jobs() == []
    for call in calls:
        call.join(timeout=30)
    assert cancelled, "the cancel returned"  # a job the resume has started by then ends later
    assert engine.wait(left.id, timeout=30).state == State.CANCELLED
    for job in [submitted[0], soon.result(timeout=30)]:
        assert engine.wait(job.id, timeout=30).state == State.SUCCEEDED
        starts = [e for e in engine.events(job.id) if e.state == State.STARTING]
        assert len(starts) == 1, f"{job.id} started {len(starts)} times"


def test_delete_forgets_an_ended_job_and_its_logs(engine: Engine, tmp_path: Path) -> None:
    job = engine.submit(_spec("name: gone\nroles:\n  worker: {command: echo bye}\n"), tmp_path)
    engine.start(job.id)
    engine.wait(job.id, timeout=30)
    assert engine.data_dir.job_dir(job.id).exists()
    engine.delete(job.id)
    assert not engine.data_dir.job_dir(job.id).exists()
    with pytest.raises(JobNotFound):
        engine.get(job.id)
    assert engine.store.list_tasks(job.id) == []
    (left,) = engine.store.list_events(job.id)  # for the change feed: that it is gone
    assert left.code == "deleted"


def test_delete_refuses_a_running_job_unless_forced(engine: Engine, tmp_path: Path) -> None:
    job = engine.submit(SLEEPERS, tmp_path)
    engine.start(job.id)
    wait_for(
        lambda: all(t.state == State.RUNNING for t in engine.tasks(job.id)), what="tasks running"
    )
    pids = [t.pid for t in engine.tasks(job.id)]
    with pytest.raises(JobActive, match="stop it first"):
        engine.delete(job.id)
    assert engine.get(job.id).state == State.RUNNING, "a refused delete changes nothing"
    engine.delete(job.id, force=True)
    with pytest.raises(JobNotFound):
        engine.get(job.id)
    assert all(pid is not None and not process_group_alive(pid) for pid in pids)


def test_a_taken_job_id_is_drawn_again(engine: Engine, tmp_path: Path, monkeypatch) -> None:
    draws = iter(["aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    monkeypatch.setattr("trainfleet.control.engine.secrets.token_hex", lambda _: next(draws))
    spec = _spec("name: twin\nroles:\n  worker: {command: 'true'}\n")
    assert engine.submit(spec, tmp_path).id == "twin-aaaaaaaa"
    assert engine.submit(spec, tmp_path).id == "twin-bbbbbbbb"
    assert len(engine.list()) == 2


def test_the_gpus_are_read_once(engine: Engine, tmp_path: Path, monkeypatch) -> None:
    """NVML takes a while to start: planning, admission and placement share one reading."""
    readings: list[int] = []

    def inventory(configured: str | None = None) -> list[int]:
        readings.append(1)
        return [0, 1]

    monkeypatch.setattr("trainfleet.backends.local.processes.gpu_inventory", inventory)
    spec = _spec(
        "name: gpu\nroles:\n  worker: {replicas: 2, command: 'true', resources: {gpu: 1}}\n"
    )
    engine.plan(spec)
    engine.dry_run(spec, tmp_path)
    job = engine.submit(spec, tmp_path)
    engine.start(job.id)
    assert engine.wait(job.id, timeout=30).state == State.SUCCEEDED
    assert engine.backend.nodes()[0].gpus == 2
    assert len(readings) == 1


@pytest.mark.parametrize(
    ("job_policy", "role_policy", "state", "restarts"),
    [
        ("never", "on-failure", State.SUCCEEDED, 1),  # the role's own policy restarts it
        ("on-failure", "never", State.FAILED, 0),  # and keeps it from restarting
    ],
)
def test_a_role_s_own_restart_policy_wins(
    engine: Engine, tmp_path: Path, job_policy: str, role_policy: str, state: State, restarts: int
) -> None:
    """Kubeflow's restartPolicy per replica type: a role may say its own."""
    fails_once = "test -e once || { touch once; exit 3; }"
    spec = _spec(
        f"name: policies\nrestart: {{policy: {job_policy}, backoff: {{initial: 0}}}}\n"
        f"roles:\n  worker: {{command: '{fails_once}', restart_policy: {role_policy}}}\n"
    )
    job = engine.submit(spec, tmp_path, start=True)
    assert engine.wait(job.id, timeout=60).state == state
    (task,) = engine.tasks(job.id)
    assert task.restarts == restarts


def test_a_job_s_first_start_is_one_write_and_reads_no_events(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's three tasks, started by one call of the backend, move to running in one
    transaction with the job (a job of 100 tasks made 101 writes to start); and a job that
    never ran has no restarts to count: its events are not read."""
    writes: list[list[str]] = []
    transitions, events_of = engine.store.transitions, engine.store.events_of
    read: list[list[str]] = []

    def counted(job_id: str, changes: Sequence[Change]) -> list[bool]:
        writes.append(
            [f"{c.task[0]}/{c.task[1]} {c.state}" if c.task else c.state for c in changes]
        )
        return transitions(job_id, changes)

    def reading(ids: list[str], *args: object) -> object:
        read.append(ids)
        return events_of(ids, *args)

    monkeypatch.setattr(engine.store, "transitions", counted)
    monkeypatch.setattr(engine.store, "events_of", reading)
    job = engine.submit(
        _spec("name: three\nroles:\n  worker: {replicas: 3, command: sleep 600}\n"), tmp_path
    )
    engine.start(job.id)
    wait_for(lambda: engine.get(job.id).state == State.RUNNING, what="the job running")
    started = ["worker/0 running", "worker/1 running", "worker/2 running", State.RUNNING]
    assert writes == [[State.STARTING], started], writes
    assert read == []
    engine.cancel(job.id)
    assert engine.wait(job.id, timeout=30).state == State.CANCELLED
