"""Every job's controller runs on a few shared threads (``control.runner``), with real
processes: a held store stalls them without losing or deadlocking anything."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import yaml
from helpers import wait_for

from trainfleet.control.engine import Engine
from trainfleet.control.runner import STARTERS, WORKERS
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec

JOBS = WORKERS * 3
ENGINE_THREADS = 6
"""The admitter, the clock, the local backend's exit watcher and two cleanup threads, and
one spare."""


def _waiting_for(go: Path) -> JobSpec:
    command = f"while [ ! -e {go} ]; do sleep 0.1; done"
    text = f"name: waits\nroles:\n  worker:\n    command: [sh, -c, '{command}']\n"
    return JobSpec.model_validate(yaml.safe_load(text))


def _running(engine: Engine, go: Path, tmp_path: Path) -> list[str]:
    """``JOBS`` jobs, each of one task waiting for ``go``, once all are running."""
    jobs = [engine.submit(_waiting_for(go), tmp_path).id for _ in range(JOBS)]
    for job_id in jobs:
        engine.start(job_id)
    wait_for(
        lambda: all(engine.get(job_id).state == State.RUNNING for job_id in jobs),
        timeout=60,
        what="every job running",
    )
    return jobs


def test_exits_that_come_while_the_store_is_held_are_all_handled(
    engine: Engine, tmp_path: Path
) -> None:
    """The test holds the store's lock while every job's task exits: the steps that write
    block on it, the reports of the others queue up behind them, and once it is free every
    job ends as it should (none lost, none stuck behind a thread that waits)."""
    go = tmp_path / "go"
    jobs = _running(engine, go, tmp_path)
    with engine.store._db._lock:  # the store held, as a hung database holds it
        go.touch()
        time.sleep(3)
        assert len(engine.runner.running()) == JOBS, "no job ends without its end written"
    for job_id in jobs:
        assert engine.wait(job_id, timeout=60).state == State.SUCCEEDED
    assert engine.runner.running() == []


def test_running_jobs_hold_no_thread_of_their_own(engine: Engine, tmp_path: Path) -> None:
    """Threads do not grow with jobs: the engine's (admission, the pool, its clock, the
    backend's exit watcher and cleanup) are all it holds, however many jobs run."""
    go = tmp_path / "go"
    before = threading.active_count()
    jobs = _running(engine, go, tmp_path)
    names = sorted(thread.name for thread in threading.enumerate())
    assert threading.active_count() - before <= WORKERS + STARTERS + ENGINE_THREADS, names
    go.touch()
    for job_id in jobs:
        assert engine.wait(job_id, timeout=60).state == State.SUCCEEDED
