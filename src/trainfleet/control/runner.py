"""Runs stored jobs in the background (the server's engine): every job's controller on a
few threads shared by all (``control.pool``), one step at a time, woken by its backend's
reports and by one clock for everyone's timers. An idle job holds no thread."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trainfleet.control.controller import JobController
from trainfleet.control.pool import Clock, KeyedPool
from trainfleet.domain.records import State
from trainfleet.store.errors import StoreUnavailable

log = logging.getLogger("trainfleet.control")

WORKERS = 8
"""Threads that run the controllers' steps (deciding, writing the store, signalling)."""

STARTERS = 4
"""Threads that run their first steps, which may build an environment or wait on a
cluster engine for minutes: so many jobs may start at once without holding up the rest."""


@dataclass(eq=False)
class _Running:
    """One job's controller, and what the runner knows of it (the key of its steps)."""

    job_id: str
    controller: JobController
    done: threading.Event = field(default_factory=threading.Event)
    begun: bool = False
    """Its first step has run (with ``resume``: its running tasks are adopted)."""
    ended: bool = False
    woken: bool = False
    """A step is asked for and has not begun: a report needs ask for none more."""
    armed: float | None = None
    """The time the clock wakes it next (on its steps' turn only)."""


class Runner:
    """Runs jobs' controllers and lets any thread cancel or await them."""

    def __init__(
        self,
        controller: Callable[[str], JobController],
        on_end: Callable[[str, State | None], None] = lambda job_id, state: None,
        on_broken: Callable[[str, Exception], None] = lambda job_id, error: None,
    ) -> None:
        """``on_end(job_id, state)`` is called on a pool thread once the job's controller
        is done, with the state it left the job in (None where it failed);
        ``on_broken(job_id, error)`` where no controller could be made for the job (then
        ``on_end`` follows, on the caller's thread)."""
        self._controller = controller
        self._on_end = on_end
        self._on_broken = on_broken
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._begun = threading.Condition(self._lock)
        """Notified as each job's first step has run (one Condition for all: a resume
        starts thousands of jobs, and an Event of each would cost more than its step)."""
        self._pool = KeyedPool("control", WORKERS, STARTERS)
        self._clock = Clock("control-clock")

    def start(
        self,
        job_id: str,
        resume: bool = False,
        make: Callable[[], JobController] | None = None,
    ) -> None:
        """Run (or, with ``resume``, pick up) a stored job until it ends; returns at once.
        ``make`` makes its controller where the caller has read the job already (by
        default, the runner's own factory reads it)."""
        try:
            controller = make() if make is not None else self._controller(job_id)
        except StoreUnavailable:
            raise
        except Exception as error:  # a secret gone, an account that cannot be made
            log.error("job %s: no controller could be made for it", job_id, exc_info=error)
            self._on_broken(job_id, error)
            self._on_end(job_id, None)
            return
        running = _Running(job_id, controller)
        controller.wake = functools.partial(self._wake, running)
        with self._lock:
            self._running[job_id] = running
        self._pool.submit(running, functools.partial(self._begin, running, resume), slow=True)

    def _begin(self, running: _Running, resume: bool) -> None:
        try:
            self._step(running, lambda: running.controller.begin(resume))
        finally:
            with self._begun:
                running.begun = True
                self._begun.notify_all()

    def _wake(self, running: _Running) -> None:
        with self._lock:
            if running.woken:
                return
            running.woken = True
        self._pool.submit(running, functools.partial(self._handle, running))

    def _handle(self, running: _Running) -> None:
        with self._lock:
            running.woken = False
        self._step(running, running.controller.handle)

    def _tick(self, running: _Running, due: float) -> None:
        if running.armed == due:
            running.armed = None
        self._step(running, running.controller.handle)

    def _step(self, running: _Running, step: Callable[[], State | None]) -> None:
        """One step of the job's controller, on its turn; then its next timer armed, or,
        once it is done, its end told."""
        if running.ended:
            return  # a wake or a tick that came after its end
        try:
            state = step()
        except Exception:
            log.exception("job %s: its controller failed", running.job_id)
            self._end(running, None)
            return
        if state is not None:
            self._end(running, state)
            return
        due = running.controller.next_due()
        if due is not None and (running.armed is None or due < running.armed):
            running.armed = due
            tick = functools.partial(self._tick, running, due)
            self._clock.at(due, functools.partial(self._pool.submit, running, tick))

    def _end(self, running: _Running, state: State | None) -> None:
        running.ended = True
        with self._lock:
            if self._running.get(running.job_id) is running:
                del self._running[running.job_id]
        try:
            self._on_end(running.job_id, state)
        finally:
            running.done.set()

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> bool:
        """Stop a running job; False when it is not running here."""
        return self._tell(job_id, lambda controller: controller.cancel(reason))

    def preempt(self, job_id: str, reason: str) -> bool:
        """Stop a running job and put it back in the queue; False when not running here."""
        return self._tell(job_id, lambda controller: controller.preempt(reason))

    def _tell(self, job_id: str, message: Callable[[JobController], None]) -> bool:
        with self._lock:
            running = self._running.get(job_id)
        if running is not None:
            message(running.controller)
        return running is not None

    def wait(self, job_id: str, timeout: float | None = None) -> bool:
        """Wait for a job to end; True when it is not running (any more). Never from a
        step of a controller: that would hold the thread its job needs to end."""
        with self._lock:
            running = self._running.get(job_id)
        return running is None or running.done.wait(timeout)

    def wait_begun(self, job_ids: Iterable[str], timeout: float | None = None) -> bool:
        """Wait until each job's first step has run (or it is not running here); False
        where ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._begun:
            for job_id in job_ids:
                running = self._running.get(job_id)
                while running is not None and not running.begun:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._begun.wait(left)
        return True

    def running(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel every running job and wait for them to end."""
        for job_id in self.running():
            self.cancel(job_id, "the server is shutting down")
        deadline = None if timeout is None else time.monotonic() + timeout
        for job_id in self.running():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self.wait(job_id, left)
