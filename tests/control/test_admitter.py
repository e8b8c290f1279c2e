"""The admitter thread: it decides under its lock, starts jobs without it, and survives
a failing store; with the engine, one queue's backlog never starves another queue."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from helpers import wait_for

from trainfleet.control.admitter import Admitter
from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import State
from trainfleet.scheduling.admission import Admission, GangJob, Preemption, Scheduler
from trainfleet.scheduling.cluster import Node, TaskDemand
from trainfleet.scheduling.resources import Resources
from trainfleet.spec.models import JobSpec
from trainfleet.spec.queues import QueueConfig
from trainfleet.store.errors import StoreError

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
    admitter = Admitter(_scheduler(), launch, _ignore, lambda job_id, reason: None)
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

    admitter = Admitter(_scheduler(cpus=1), lambda a: launched.append(a.job), _ignore, note_waiting)
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

    admitter = Admitter(_scheduler(cpus=1), launch, _ignore, lambda job_id, reason: None)
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
    admitter = Admitter(_scheduler(), launch, _ignore, lambda job_id, reason: None)
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
