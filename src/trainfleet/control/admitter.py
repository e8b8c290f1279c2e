"""The scheduler at work: one thread that admits queued jobs, in passes.

Submitting a job only queues it and wakes the thread, so a submission answers at once
and a burst of them is admitted in a few passes rather than one pass each. A pass
starts what it admits, asks running jobs to make room when it preempts, and stores why
the others wait. Everything that touches the scheduler holds ``lock``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from trainfleet.scheduling.admission import Admission, Decisions, Preemption, Scheduler
from trainfleet.store.connection import patiently

MIN_INTERVAL = 0.005
"""Seconds from the start of one pass to the next, at least."""
BUSY_SHARE = 0.1
"""The most of the time passes may take while they follow each other: a long pass is
followed by a longer pause, so that a burst of submissions leaves the server time to
answer them."""
LONGEST_PAUSE = 1.0
"""Seconds between two passes, at most: a pass that waited out a store outage is long, and
the jobs queued meanwhile must not wait ten times as long again."""


class Admitter:
    """Runs ``scheduler`` passes on a daemon thread whenever something changed."""

    def __init__(
        self,
        scheduler: Scheduler,
        launch: Callable[[Admission], None],
        preempt: Callable[[Preemption], object],
        note_waiting: Callable[[str, str], None],
    ) -> None:
        """``note_waiting(job_id, reason)`` is called when a waiting job's reason changes."""
        self.scheduler = scheduler
        self._launch = launch
        self._preempt = preempt
        self._note_waiting = note_waiting
        self.lock = threading.Condition(threading.RLock())
        """Held while the scheduler is used; notified after every pass and every end."""
        self._reasons: dict[str, str] = {}
        self._wanted = threading.Event()
        self._thread = threading.Thread(target=self._patiently, name="admitter", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Ask for a pass soon (jobs were queued, ended, or quotas changed)."""
        self._wanted.set()

    def withdraw(self, job_id: str) -> bool:
        with self.lock:
            self._reasons.pop(job_id, None)
            return self.scheduler.withdraw(job_id)

    def finished(self, job_id: str) -> None:
        """An admitted job ended (or stopped for preemption): its resources are free."""
        with self.lock:
            self.scheduler.finished(job_id)
            self.lock.notify_all()
        self.wake()

    def wait(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``done()`` (checked after each pass or end); False on timeout."""
        with self.lock:
            return self.lock.wait_for(done, timeout)

    def _pass(self) -> Decisions:
        """One pass, now, on the calling thread."""
        with self.lock:
            decisions = self.scheduler.schedule()
            for admission in decisions.admitted:
                self._reasons.pop(admission.job, None)
                self._launch(admission)
            for preemption in decisions.preempted:
                self._preempt(preemption)
            for job_id in self.scheduler.pending(decisions.considered):
                reason = self.scheduler.waiting_reason(job_id) or ""
                if self._reasons.get(job_id) != reason:
                    self._reasons[job_id] = reason
                    self._note_waiting(job_id, reason)
            self.lock.notify_all()
        return decisions

    def _patiently(self) -> None:
        # A pass waits out a store outage: what it admitted is launched, not dropped.
        with patiently():
            self._loop()

    def _loop(self) -> None:
        next_pass = 0.0
        while True:
            self._wanted.wait()
            # A burst of submissions is taken in a few passes, not one pass each.
            time.sleep(max(0.0, next_pass - time.monotonic()))
            self._wanted.clear()
            began = time.monotonic()
            self._pass()
            took = time.monotonic() - began
            next_pass = began + min(LONGEST_PAUSE, max(MIN_INTERVAL, took / BUSY_SHARE))
