"""The admitter thread: it decides under its lock, starts jobs without it, and survives
a failing store; with the engine, one queue's backlog never starves another queue."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml
from helpers import wait_for

from trainfleet.backends.supervision.ports import PORTS
from trainfleet.control.admitter import LAUNCH_BATCH, Admitter
from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State
from trainfleet.scheduling.admission import Admission, GangJob, Preemption, Scheduler
from trainfleet.scheduling.cluster import Node, TaskDemand
from trainfleet.scheduling.resources import Resources
from trainfleet.spec.models import JobSpec
from trainfleet.spec.queues import QueueConfig
from trainfleet.store.errors import StoreError, StoreUnavailable

ONE_CPU = TaskDemand(Resources(cpu=1000))


def _gang(job_id: str, order: float) -> GangJob:
    return GangJob(job_id, (ONE_CPU,), order=order)


def _scheduler(cpus: int = 4) -> Scheduler:
    return Scheduler([Node("n", Resources(cpu=cpus * 1000))])


def _submit(admitter: Admitter, job: GangJob) -> None:
    with admitter.lock:
        admitter.scheduler.submit(job)
    admitter.wake()


def _ignore(preemption: Preemption) -> None:
    raise AssertionError(f"nothing to preempt here, yet {preemption}")


def each(
    launch: Callable[[Admission], object],
) -> Callable[[Sequence[Admission]], dict[str, Exception]]:
    """A launch of a batch that calls ``launch`` for each job: the jobs it raised for."""

    def batch(admissions: Sequence[Admission]) -> dict[str, Exception]:
        failed = {}
        for admission in admissions:
            try:
                launch(admission)
            except Exception as error:
                failed[admission.job] = error
        return failed

    return batch


def _held_launch() -> tuple[
    threading.Event, threading.Event, list[str], Callable[[Admission], None]
]:
    """A launch that says when it began and ends only once ``go_on`` is set."""
    launching, go_on = threading.Event(), threading.Event()
    launched: list[str] = []

    def launch(admission: Admission) -> None:
        launching.set()
        assert go_on.wait(60), "the test thread never let the launch go on"
        launched.append(admission.job)

    return launching, go_on, launched, launch


def test_a_job_is_launched_without_the_lock_held() -> None:
    """While a launch runs (starting processes takes a while), a submission, a cancel or
    a status read can take the lock: another thread gets it at once."""
    launching, go_on, launched, launch = _held_launch()
    admitter = Admitter(_scheduler(), each(launch), _ignore, lambda job_id, reason: None)
    _submit(admitter, _gang("slow", 0))
    assert launching.wait(30), "the job was never launched"
    try:
        got = admitter.lock.acquire(timeout=10)
        assert got, "the lock is held while the job is launched"
        try:
            admitter.scheduler.submit(_gang("next", 1))  # a submission meanwhile
        finally:
            admitter.lock.release()
    finally:
        go_on.set()
    admitter.wake()
    assert admitter.wait(lambda: launched == ["slow", "next"], timeout=30), launched


def test_a_store_error_in_a_pass_is_logged_once_and_the_pass_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store fails (injected: the first writes of waiting reasons raise StoreError, as
    a stopped database makes them): the admitter logs it once, backs off, and goes on."""
    failures = 3
    noted: dict[str, Condition] = {}
    launched: list[str] = []

    def note_waiting(job_id: str, reason: Condition) -> None:
        nonlocal failures
        if failures:
            failures -= 1
            raise StoreError("cannot connect to the database (injected)")
        noted[job_id] = reason

    admitter = Admitter(
        _scheduler(cpus=1), each(lambda a: launched.append(a.job)), _ignore, note_waiting
    )
    with caplog.at_level(logging.WARNING, logger="trainfleet.admitter"):
        _submit(admitter, _gang("runs", 0))
        _submit(admitter, _gang("waits", 1))
        wait_for(lambda: "waits" in noted, timeout=30, what="the reason stored after the outage")
        assert noted["waits"].code is Code.WAITING_FOR_RESOURCES, noted
        assert noted["waits"].message.startswith("waiting for resources"), noted
        admitter.finished("runs")
        assert admitter.wait(lambda: launched == ["runs", "waits"], timeout=30), launched
    failed = [r for r in caplog.records if "scheduling pass failed" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]
    assert failed[0].exc_info is not None and failed[0].exc_info[0] is StoreError
    assert any("succeed again" in r.getMessage() for r in caplog.records)


def test_a_job_whose_launch_fails_waits_again_and_is_launched_on_the_retry() -> None:
    """A launch raises (the store is down while its tasks are placed): the job gives back
    what it was given and waits in its old place; the retried pass starts it."""
    tries: list[str] = []

    def launch(admission: Admission) -> None:
        tries.append(admission.job)
        if len(tries) == 1:
            raise StoreError("cannot connect to the database (injected)")

    admitter = Admitter(_scheduler(cpus=1), each(launch), _ignore, lambda job_id, reason: None)
    _submit(admitter, _gang("first", 0))
    _submit(admitter, _gang("second", 1))
    assert admitter.wait(lambda: len(tries) >= 2, timeout=30), tries
    with admitter.lock:
        assert tries == ["first", "first"], "the job lost its place, or was not retried"
        assert admitter.scheduler.admitted() == ["first"]
        assert admitter.scheduler.pending() == ["second"]


def _spec(text: str) -> JobSpec:
    return JobSpec.model_validate(yaml.safe_load(text))


def test_jobs_over_a_queues_quota_never_starve_another_queue(
    engine: Engine, tmp_path: Path
) -> None:
    """65 jobs in a queue with room for one (64 wait on its quota: the backfill depth),
    then a job in ``default`` on the idle rest of the machine: it runs, and every job that
    waits has its reason stored."""
    engine.set_queue(QueueConfig.model_validate({"name": "capped", "nominal": {"cpu": 0.1}}))
    capped = _spec(
        "name: capped\nqueue: capped\ngrace_period: 1\n"
        "roles:\n  w: {command: sleep 600, resources: {cpu: 0.1}}\n"
    )
    jobs = [engine.submit(capped, tmp_path, start=True) for _ in range(65)]
    other = engine.submit(
        _spec("name: other\nroles:\n  w: {command: 'true', resources: {cpu: 0.1}}\n"),
        tmp_path,
        start=True,
    )
    try:
        ended = engine.wait(other.id, timeout=60)
        assert ended.state == State.SUCCEEDED, ended
        waiting = [job for job in jobs if engine.get(job.id).state == State.QUEUED]
        assert len(waiting) == 64
        wait_for(
            lambda: all(
                (job := engine.get(waiter.id)).waiting.startswith(
                    "waiting for quota: queue 'capped'"
                )
                and job.waiting_code == Code.WAITING_FOR_QUOTA
                for waiter in waiting
            ),
            timeout=30,
            what="every waiting job's reason",
        )
    finally:
        for job in jobs:
            engine.cancel(job.id)
        for job in jobs:
            engine.wait(job.id, timeout=60)


def test_a_cancel_waits_for_a_launch_under_way() -> None:
    """A job admitted by a pass is started without the lock: one that waits for it (a
    cancel) returns only once the launch has ended, so it finds the job running."""
    launching, go_on, launched, launch = _held_launch()
    admitter = Admitter(_scheduler(), each(launch), _ignore, lambda job_id, reason: None)
    _submit(admitter, _gang("slow", 0))
    assert launching.wait(30), "the job was never launched"
    seen: list[list[str]] = []
    waiter = threading.Thread(
        target=lambda: (admitter.wait_launched("slow"), seen.append(list(launched)))
    )
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive(), "wait_launched returned while the launch was under way"
    go_on.set()
    waiter.join(30)
    assert seen == [["slow"]]


def test_a_burst_is_launched_in_batches_and_a_job_its_batch_failed_waits_again() -> None:
    """300 jobs admitted by one pass are launched ``LAUNCH_BATCH`` at a time, in order; a
    job that its batch could not launch (the launch says so) waits again in its place and
    is launched by the next pass, the others of its batch are not launched twice."""
    batches: list[list[str]] = []

    def launch(admissions: Sequence[Admission]) -> dict[str, Exception]:
        batches.append([admission.job for admission in admissions])
        first = len(batches) == 1
        return {"job-005": StoreError("injected")} if first else {}

    admitter = Admitter(_scheduler(cpus=300), launch, _ignore, lambda job_id, reason: None)
    with admitter.lock:  # all of them queued before the first pass
        for n in range(300):
            admitter.scheduler.submit(_gang(f"job-{n:03d}", n))
    admitter.wake()
    launched = lambda: [job for batch in batches for job in batch]  # noqa: E731
    assert admitter.wait(lambda: len(launched()) == 301, timeout=30), batches
    assert [len(batch) for batch in batches] == [
        LAUNCH_BATCH,
        LAUNCH_BATCH,
        300 - 2 * LAUNCH_BATCH,
        1,
    ]
    assert launched()[:300] == [f"job-{n:03d}" for n in range(300)]
    assert batches[-1] == ["job-005"]
    with admitter.lock:
        assert sorted(admitter.scheduler.admitted()) == [f"job-{n:03d}" for n in range(300)]


def test_an_engine_places_a_pass_s_jobs_in_one_write_and_a_failed_write_loses_none(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs admitted by one pass are read and placed in one query and one transaction for
    them all; where that write fails (injected: the database stopped), every one of them
    waits again with its ports given back, and the retried pass starts them all."""
    writes: list[list[str]] = []
    held: list[set[int]] = []  # the jobs' ports at each write
    place = engine.store.place_tasks
    before = PORTS.held()

    def failing_once(places: dict) -> None:
        writes.append(sorted(places))
        held.append(PORTS.held() - before)
        if len(writes) == 1:
            raise StoreError("cannot connect to the database (injected)")
        place(places)

    monkeypatch.setattr(engine.store, "place_tasks", failing_once)
    spec = _spec(
        "name: burst\nroles:\n  w: {command: 'true', replicas: 2, resources: {cpu: 0.1}}\n"
    )
    with engine.admitter.lock:  # all of them queued before the first pass
        jobs = [engine.submit(spec, tmp_path, start=True) for _ in range(6)]
    for job in jobs:
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
    ids = sorted(job.id for job in jobs)
    assert writes[:2] == [ids, ids], writes
    assert len(held[0]) == 12, held
    assert not held[0] & held[1], "the failed launch's ports were not given back"


def test_a_job_whose_controller_cannot_be_made_waits_alone_and_the_rest_start_once(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One job of a pass's batch cannot be started (injected: the store goes away as its
    controller reads it): that job alone waits again and starts on the retry; every other
    job of the batch is started once, never twice."""
    made: list[str] = []
    make = engine._controller_of

    def once_away(job: JobRecord, *args: object, **kwargs: object) -> object:
        made.append(job.id)
        if made.count(job.id) == 1 and job.id == unlucky:
            raise StoreUnavailable("cannot connect to the database (injected)")
        return make(job, *args, **kwargs)

    monkeypatch.setattr(engine, "_controller_of", once_away)
    spec = _spec("name: batch\nroles:\n  w: {command: 'true', resources: {cpu: 0.1}}\n")
    with engine.admitter.lock:  # all of them queued before the first pass
        jobs = [engine.submit(spec, tmp_path, start=True) for _ in range(5)]
        unlucky = jobs[2].id
    for job in jobs:
        assert engine.wait(job.id, timeout=60).state == State.SUCCEEDED
    assert sorted(made) == sorted([job.id for job in jobs] + [unlucky]), made
