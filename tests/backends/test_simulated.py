"""What the simulated backend (a simulation for benchmarks, no process at all) does beyond
the conformance cases: placements after ``pending``, its failure rate, stalls, the records a
benchmark reads, and a server killed with -9 whose successor adopts its tasks."""

from __future__ import annotations

import itertools
import json
import secrets
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import killed_sim_engine, wait_for
from task_reports import Reports

from trainfleet.backends.api import NotStarted, TaskHandle
from trainfleet.backends.launch import JobLaunch
from trainfleet.backends.simulated import (
    SIM_VARIABLE,
    SimulatedBackend,
    attempts,
    request_failure_rate,
    request_stall,
)
from trainfleet.control.assembly import engine_at
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.records import State
from trainfleet.scheduling.placement import Placement, TaskKey, TaskSlot, task_keys
from trainfleet.spec.models import JobSpec

WORKER: TaskKey = ("worker", 0)


def _job(
    root: Path, backend: SimulatedBackend, plan: dict[str, Any], replicas: int = 1, attempt: int = 0
) -> JobLaunch:
    """A job of ``replicas`` simulated workers following ``plan``, its addresses reserved."""
    env = {SIM_VARIABLE: json.dumps(plan)}
    roles = {"worker": {"command": "true", "replicas": replicas, "env": env}}
    spec = JobSpec.model_validate({"name": "sim", "roles": roles})
    job_id = f"sim-{secrets.token_hex(4)}"
    addresses = backend.reserve(job_id, spec)
    slots = tuple(TaskSlot(*key, *addresses[key], ()) for key in task_keys(spec))
    workdir = root / "work"
    workdir.mkdir(exist_ok=True)
    keys = dict.fromkeys(task_keys(spec), attempt)
    return JobLaunch(job_id, spec, Placement(slots), workdir, DataDir(root / "data"), keys)


def _start(backend: SimulatedBackend, job: JobLaunch, reports: Reports) -> list[TaskHandle]:
    started = backend.start(job, reports)
    assert not [why for why in started.values() if isinstance(why, NotStarted)], started
    return [TaskHandle(str(handle)) for handle in started.values()]


def test_a_task_waits_for_a_place_then_runs_its_time(tmp_path: Path) -> None:
    backend = SimulatedBackend(nodes=2)
    job = _job(tmp_path, backend, {"pending": 0.4, "runs": 0.3, "exit": 3, "output": "hi\n"})
    reports = Reports()
    began = time.time()
    (handle,) = _start(backend, job, reports)
    assert backend.describe(handle).pid is None
    assert not reports.places, "no place before its pending time"
    assert reports.codes() == {WORKER: 3}
    ((key, address, note),) = reports.places
    port = job.placement.slot(*WORKER).port
    assert key == WORKER and address == f"sim0:{port}" and "sim0" in note
    (attempt,) = attempts(job.data_dir.run_dir(job.job_id))
    assert attempt.started_at >= began and attempt.code == 3 and not attempt.injected
    assert attempt.ended_at is not None and attempt.reported_at is not None
    assert attempt.ended_at - attempt.started_at >= 0.7 - 0.01, "pending, then runs"
    assert backend.log_path(job.data_dir, job.job_id, WORKER).read_text() == "hi\n"
    backend.release(job.job_id)


def test_a_bad_plan_says_what_is_wrong(tmp_path: Path) -> None:
    backend = SimulatedBackend()
    job = _job(tmp_path, backend, {"runs": "soon", "wait": 1})
    (why,) = backend.start(job, Reports()).values()
    assert isinstance(why, NotStarted) and not why.retry
    assert SIM_VARIABLE in why.reason and "runs" in why.reason and "wait" in why.reason
    assert backend.last_attempt(job.data_dir, job.job_id, WORKER) is None
    assert "runs" in str(backend.dryrun(job).submission)
    backend.release(job.job_id)


def test_a_task_stopped_while_it_waits_ends_at_once(tmp_path: Path) -> None:
    backend = SimulatedBackend()
    job = _job(tmp_path, backend, {"pending": 60, "on_term": "ignore"})
    reports = Reports()
    (handle,) = _start(backend, job, reports)
    backend.stop(handle)
    assert reports.codes() == {WORKER: -15}, "cancelled in the queue, whatever it would do"
    assert not reports.places
    backend.release(job.job_id)


def test_failures_come_at_the_rate_asked(tmp_path: Path) -> None:
    """120 a minute is a mean life of 0.5 s: 200 tasks that only fail end on average then."""
    backend = SimulatedBackend(fail_per_minute=120, seed=7)
    job = _job(tmp_path, backend, {}, replicas=200)
    reports = Reports()
    _start(backend, job, reports)
    assert set(reports.codes(200).values()) == {1}
    found = list(attempts(job.data_dir.run_dir(job.job_id)))
    assert len(found) == 200 and all(attempt.injected for attempt in found)
    lives = [a.ended_at - a.placed_at for a in found if a.ended_at and a.placed_at]
    assert len(lives) == 200
    assert 0.38 < statistics.mean(lives) < 0.65, statistics.mean(lives)  # 4 sd: 0.36 to 0.64
    backend.release(job.job_id)


def test_the_failure_rate_is_steered_by_its_file(tmp_path: Path) -> None:
    backend = SimulatedBackend(scan_seconds=0.1)
    job = _job(tmp_path, backend, {})
    reports = Reports()
    _start(backend, job, reports)
    assert reports.none_yet(0.5), "no failure at rate 0"
    request_failure_rate(job.data_dir.root, 6000)  # a mean life of 10 ms
    assert reports.codes() == {WORKER: 1}
    backend.release(job.job_id)


def test_a_stall_holds_every_report_and_refuses_starts_for_a_retry(tmp_path: Path) -> None:
    backend = SimulatedBackend()
    job = _job(tmp_path, backend, {"runs": 0.2})
    reports = Reports()
    _start(backend, job, reports)
    backend.stall(1.5)
    later = _job(tmp_path, backend, {"runs": 0})
    (refused,) = backend.start(later, Reports()).values()
    assert isinstance(refused, NotStarted) and refused.retry
    assert backend.last_attempt(later.data_dir, later.job_id, WORKER) is None, "nothing kept"
    assert reports.none_yet(1.0), "the task ended meanwhile, but that is not reported yet"
    assert not reports.places
    assert reports.codes() == {WORKER: 0}
    assert [key for key, _, _ in reports.places] == [WORKER], "its place came first"
    (attempt,) = attempts(job.data_dir.run_dir(job.job_id))
    assert attempt.ended_at is not None and attempt.reported_at is not None
    assert attempt.reported_at - attempt.ended_at > 1.0, "held until the stall ended"
    for launch in (job, later):
        backend.release(launch.job_id)


def test_a_stall_file_stalls_a_backend_in_another_process(tmp_path: Path) -> None:
    backend = SimulatedBackend(data_dir=tmp_path / "data", scan_seconds=0.1)
    job = _job(tmp_path, backend, {"runs": 0})
    until = request_stall(job.data_dir.root, 1.5)
    wait_for(backend.stalled, timeout=1, what="the stall file to be read")
    (refused,) = backend.start(job, Reports()).values()
    assert isinstance(refused, NotStarted) and refused.retry
    wait_for(lambda: not backend.stalled(), timeout=10, what="the stall to end")
    assert time.time() >= until
    reports = Reports()
    _start(backend, job, reports)
    assert reports.codes() == {WORKER: 0}
    backend.release(job.job_id)


def test_a_restart_is_timed_from_its_exit_report_to_the_next_start(tmp_path: Path) -> None:
    backend = SimulatedBackend()
    first = _job(tmp_path, backend, {"runs": 0, "exit": 1})
    reports = Reports()
    _start(backend, first, reports)
    assert reports.codes() == {WORKER: 1}
    again = replace(first, attempts={WORKER: 1})
    _start(backend, again, reports)
    assert reports.codes() == {WORKER: 1}
    assert backend.last_attempt(first.data_dir, first.job_id, WORKER) == 1
    zero, one = sorted(attempts(first.data_dir.run_dir(first.job_id)), key=lambda a: a.attempt)
    assert zero.reported_at is not None and one.started_at >= zero.reported_at
    backend.release(first.job_id)


def test_a_server_killed_with_nine_has_its_tasks_adopted_by_the_next(tmp_path: Path) -> None:
    """A real engine on the simulation is killed (-9) with three jobs: one that runs on, one
    whose end comes while no server runs, one still waiting for a place. The next server's
    engine, on a new backend, adopts the first and third and learns the second's exit."""
    data = tmp_path / "data"
    forever, ends, waits = killed_sim_engine(data)
    time.sleep(1.5)  # the second one's end passes while no server runs
    engine = engine_at(data, supervised=True, backend=SimulatedBackend())
    try:
        assert sorted(engine.resume()) == sorted([forever, ends, waits])
        assert engine.wait(ends, timeout=30).state == State.SUCCEEDED
        wait_for(lambda: engine.get(waits).state == State.RUNNING, timeout=30, what="a late place")
        adopted = {e.code for e in engine.store.list_events(forever) if e.task}
        assert "adopted" in adopted and engine.get(forever).state == State.RUNNING
        for job_id in (forever, waits):
            live = [a for a in attempts(engine.data_dir.run_dir(job_id)) if a.code is None]
            assert len(live) == 1, "one live attempt per task"
            engine.cancel(job_id)
            assert engine.wait(job_id, timeout=30).state == State.CANCELLED
    finally:
        engine.shutdown()
        engine.store.close()


@pytest.mark.parametrize("runs", [None, 0.3])
def test_an_engine_restarts_what_fails_and_counts_it(tmp_path: Path, runs: float | None) -> None:
    """On a real engine: a task that fails twice at once is restarted twice, then the job
    fails (``runs``: None, the failure rate does it; else its plan's exit status)."""
    backend = SimulatedBackend(fail_per_minute=6000 if runs is None else 0)
    engine = engine_at(tmp_path / "data", backend=backend)
    plan = {} if runs is None else {"runs": runs, "exit": 1}
    text = {
        "name": "fails",
        "restart": {"policy": "on-failure", "max_restarts": 2, "backoff": {"initial": 0}},
        "roles": {"worker": {"command": "true", "env": {SIM_VARIABLE: json.dumps(plan)}}},
    }
    try:
        job = engine.submit(JobSpec.model_validate(text), tmp_path, start=True)
        assert engine.wait(job.id, timeout=60).state == State.FAILED
        (task,) = engine.tasks(job.id)
        assert task.restarts == 2 and task.exit_code == 1
        found = sorted(attempts(engine.data_dir.run_dir(job.id)), key=lambda a: a.attempt)
        assert [a.attempt for a in found] == [0, 1, 2]
        assert all(a.injected == (runs is None) for a in found)
        for before, after in itertools.pairwise(found):
            assert before.reported_at is not None and after.started_at >= before.reported_at
    finally:
        engine.shutdown()
        engine.store.close()
