"""Embedded engines side by side on one machine: who runs each job, and one view of it.

Every process that runs a job embedded (``trainfleet run``, the runner of an embedded
``submit``) leaves ``runner.pid`` (its pid and start time, ``datadir.runners``) in the
job's folder. A job
that has not ended but whose runner is gone (dead, or its pid reused) is *lost*: any
trainfleet process that finds one ends what is left of its tasks and records it as
failed, so ``stop``, ``delete`` and ``list`` work on it.

Such processes admit their jobs against the same machine: each admission runs under an
exclusive lock on the data directory (``admission.lock``, fcntl) and counts what the
store's started jobs of live runners hold. A job that does not fit waits, says which
jobs hold what it needs, and tries again every ``RETRY_SECONDS`` or when it is cancelled.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trainfleet.datadir.layout import DataDir
from trainfleet.datadir.runners import lost_runner
from trainfleet.domain.records import JobRecord, Reason, State

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine

LOCK_FILE = "admission.lock"
RETRY_SECONDS = 0.5
"""Seconds between two tries of a job that waits for another process's jobs."""
HOLDING = (State.STARTING, State.RUNNING, State.RESTARTING)
"""The states of a job that holds its CPUs, memory and GPUs."""

log = logging.getLogger(__name__)


@contextlib.contextmanager
def machine_lock(data_dir: DataDir) -> Iterator[None]:
    """Hold the data directory's admission lock (one holder among all processes)."""
    data_dir.root.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(data_dir.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def fail_if_lost(engine: Engine, job: JobRecord) -> JobRecord:
    """The job, recorded as failed first when its runner is gone."""
    if State(job.state).is_final or lost_runner(engine.data_dir, job.id) is None:
        return job
    with machine_lock(engine.data_dir):
        return _fail_lost(engine, engine.get(job.id))


def _fail_lost(engine: Engine, job: JobRecord) -> JobRecord:
    """Under the machine lock: end a lost job's leftover tasks and record it as failed."""
    pid = lost_runner(engine.data_dir, job.id)
    if State(job.state).is_final or pid is None:
        return job
    lost = Reason.LOST.condition(f"the trainfleet process running it ended (pid {pid})")
    for task in engine.store.list_tasks(job.id):
        # A tethered shim ends its task itself, but one killed with its runner cannot.
        engine.backend.abandon(engine.data_dir, job.id, (task.role, task.index))
        if not State(task.state).is_final:
            engine.store.transition(job.id, State.FAILED, lost, task=(task.role, task.index))
    engine.store.transition(job.id, State.FAILED, lost, finished_at=time.time())
    log.warning("job %s: %s", job.id, lost.message)
    return engine.get(job.id)


def holders(engine: Engine, job_id: str) -> list[JobRecord]:
    """Under the machine lock: the started jobs of other live processes (lost ones are
    recorded as failed on the way)."""
    ours = {job_id, *engine.runner.running()}
    found: dict[str, JobRecord] = {}
    for state in HOLDING:
        for job in engine.store.find_jobs(state=state, limit=10_000).jobs:
            # Once only: a job that went from starting to running between two of these
            # reads is found twice, and held twice it would keep its GPUs here for good.
            if job.id in ours or job.id in found:
                continue
            if not State(_fail_lost(engine, job).state).is_final:
                found[job.id] = job
    return list(found.values())


class SharedAdmission:
    """Admits one stored job of this process beside the jobs of the machine's other
    trainfleet processes, on a thread of its own; it ends once the job started or ended."""

    def __init__(self, engine: Engine, job_id: str) -> None:
        self.engine = engine
        self.job_id = job_id
        self._thread = threading.Thread(target=self._run, name=f"admit-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            self._admit()
        except Exception as error:  # never silently: the job fails and says why
            log.exception("job %s: admission failed", self.job_id)
            failed = Reason.ADMISSION_FAILED.condition(error)
            with contextlib.suppress(Exception):
                self.engine.store.transition(
                    self.job_id, State.FAILED, failed, finished_at=time.time()
                )

    def _admit(self) -> None:
        engine, noted = self.engine, None
        while True:
            with machine_lock(engine.data_dir):
                if State(engine.get(self.job_id).state).is_final:
                    return
                waiting = engine.admit_beside(self.job_id, holders(engine, self.job_id))
                if waiting is None:
                    return
            if waiting != noted:  # said once, as an event too (a cancelled job stays so)
                noted = waiting
                engine.store.note(self.job_id, State.QUEUED, waiting, waiting=True)
            if engine.wait_ended(self.job_id, RETRY_SECONDS):
                return
