"""Stopping a job of this data directory that another local process runs (a ``trainfleet
run`` in a terminal, an embedded submission's runner): that process is asked (SIGTERM), as
Ctrl-C would, and the job's end is awaited."""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

from trainfleet.datadir import runners
from trainfleet.domain.errors import Conflict
from trainfleet.domain.records import JobActive, JobRecord, State

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine

STOP_TIMEOUT = 60.0
"""Seconds to wait for another process to stop a job it runs."""


class NotStopped(Conflict):
    """The process that runs the job did not end it in time."""


def stop(engine: Engine, job_id: str, reason: str) -> JobRecord:
    """Stop the job here, or ask the local process that runs it to; JobActive where no
    live process of this machine runs it."""
    try:
        return engine.cancel(job_id, reason)
    except JobActive:
        job = engine.get(job_id)  # a lost job is failed now
        if State(job.state).is_final:
            return job
        pid = runners.live_runner(engine.data_dir, job_id)
        if pid is None:
            raise
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        job = engine.get(job_id)
        if State(job.state).is_final:
            return job
        time.sleep(0.1)
    raise NotStopped(f"job {job_id} did not stop within {STOP_TIMEOUT:.0f}s")
