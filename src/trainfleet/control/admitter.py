"""The scheduler at work: one thread that admits queued jobs, in passes.

Submitting a job only queues it and wakes the thread, so a submission answers at once
and a burst of them is admitted in a few passes rather than one pass each. A pass
decides under ``lock`` (everything that touches the scheduler holds it), then, with the
lock released, starts what it admitted, asks running jobs to make room when it
preempted, and stores why the others wait: starting processes never keeps a submission,
a cancel or a status read waiting.

The thread never dies: a pass that fails (the store is down) is logged once, and the
thread backs off and tries again until one succeeds, which it logs too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from trainfleet.domain.conditions import Condition
from trainfleet.scheduling.admission import Admission, Decisions, Preemption, Scheduler
from trainfleet.store.connection import patiently

log = logging.getLogger("trainfleet.admitter")

MIN_INTERVAL = 0.005
"""Seconds from the start of one pass to the next, at least."""
BUSY_SHARE = 0.1
"""The most of the time passes may take while they follow each other: a long pass is
followed by a longer pause, so that a burst of submissions leaves the server time to
answer them..."""
MAX_PAUSE = 0.2
"""...but never longer than this many seconds: a job that fits never waits long for one."""
LAUNCH_BATCH = 128
"""Admitted jobs launched together (their store reads and writes made once for all): a
burst's pass admits thousands, and the first of them need not wait for the last."""
RETRY_FIRST, RETRY_MAX = 0.1, 5.0
"""Seconds before a failed pass is tried again: doubled after each failure, up to the max."""


class Admitter:
    """Runs ``scheduler`` passes on a daemon thread whenever something changed."""

    def __init__(
        self,
        scheduler: Scheduler,
        launch: Callable[[Sequence[Admission]], Mapping[str, Exception]],
        preempt: Callable[[Preemption], object],
        note_waiting: Callable[[str, Condition], object],
        before_pass: Callable[[Scheduler], object] | None = None,
    ) -> None:
        """``launch`` starts admitted jobs, ``LAUNCH_BATCH`` at most at a time (called
        without ``lock``): it answers the jobs it could not start for now, each with why,
        which wait again in their old places (all of them, where it raises);
        ``note_waiting(job_id, condition)`` is called when why a waiting job waits changes;
        ``before_pass(scheduler)`` before each pass decides (under ``lock``: it keeps
        unhealthy GPUs out of it)."""
        self.scheduler = scheduler
        self._before_pass = before_pass
        self._launch = launch
        self._preempt = preempt
        self._note_waiting = note_waiting
        self.lock = threading.Condition(threading.RLock())
        """Held while the scheduler is used; notified after every pass and every end."""
        self._reasons: dict[str, Condition] = {}
        self._launching: set[str] = set()
        self._to_note: dict[str, None] = {}  # waiting jobs whose reason may have changed
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

    def requeued(self, job_id: str) -> None:
        """An admitted job went back to the queue (preempted, or off an unhealthy GPU): its
        resources are free, and it waits again in its old place."""
        with self.lock:
            self.scheduler.requeue(job_id)
            self.lock.notify_all()
        self.wake()

    def wait(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until ``done()`` (checked after each pass or end); False on timeout."""
        with self.lock:
            return self.lock.wait_for(done, timeout)

    def wait_launched(self, job_id: str) -> None:
        """Wait, holding ``lock`` (the caller's, released meanwhile), until a job admitted
        by a pass has been started or has gone back to the queue."""
        with self.lock:
            self.lock.wait_for(lambda: job_id not in self._launching)

    def _pass(self) -> Decisions:
        """One pass, now, on the calling thread: decide under the lock, then act."""
        with self.lock:
            if self._before_pass is not None:
                self._before_pass(self.scheduler)
            decisions = self.scheduler.schedule()
            for admission in decisions.admitted:
                self._reasons.pop(admission.job, None)
                self._launching.add(admission.job)
            self._to_note.update(dict.fromkeys(decisions.waiting + decisions.passed_over))
        failed: Exception | None = None
        for start in range(0, len(decisions.admitted), LAUNCH_BATCH):
            batch = decisions.admitted[start : start + LAUNCH_BATCH]
            try:
                errors = self._launch(batch)
            except Exception as error:
                errors = {admission.job: error for admission in batch}
            with self.lock:
                for admission in batch:
                    if admission.job in errors:  # it waits again, and the pass is retried
                        failed = failed or errors[admission.job]
                        self.scheduler.requeue(admission.job)
                    self._launching.discard(admission.job)
                self.lock.notify_all()
        for preemption in decisions.preempted:
            self._preempt(preemption)
        self._note_reasons()
        with self.lock:
            self.lock.notify_all()
        if failed is not None:
            raise failed
        return decisions

    def _patiently(self) -> None:
        # A pass waits out a store outage: what it admitted is launched, not dropped.
        with patiently():
            self._loop()

    def _note_reasons(self) -> None:
        """Store the reasons that changed, until a pass is wanted (the rest wait for the
        next pass: a job that fits must not wait for a thousand reasons to be written)."""
        for job_id in list(self._to_note):
            if self._wanted.is_set():
                return
            with self.lock:  # one row at a time: a cancel must not be overwritten
                why = self.scheduler.waiting(job_id)
                if why is not None and self._reasons.get(job_id) != why:
                    self._note_waiting(job_id, why)
                    self._reasons[job_id] = why
                del self._to_note[job_id]

    def _loop(self) -> None:
        next_pass, retry, failing = 0.0, RETRY_FIRST, False
        while True:
            self._wanted.wait()
            # A burst of submissions is taken in a few passes, not one pass each.
            time.sleep(max(0.0, next_pass - time.monotonic()))
            self._wanted.clear()
            began = time.monotonic()
            try:
                self._pass()
            except Exception:
                if not failing:
                    log.exception("a scheduling pass failed; retrying until one succeeds")
                failing = True
                self._wanted.set()
                next_pass = time.monotonic() + retry
                retry = min(retry * 2, RETRY_MAX)
                continue
            if failing:
                log.warning("scheduling passes succeed again")
            failing, retry = False, RETRY_FIRST
            took = time.monotonic() - began
            pause = min(took / BUSY_SHARE - took, MAX_PAUSE)
            next_pass = began + max(MIN_INTERVAL, took + pause)
