"""Runs stored jobs in the background, one controller thread each (the server's engine)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from trainfleet.control.controller import JobController
from trainfleet.domain.records import State
from trainfleet.store.connection import patiently
from trainfleet.store.errors import StoreUnavailable

log = logging.getLogger("trainfleet.control")


@dataclass
class _Running:
    controller: JobController
    thread: threading.Thread
    done: threading.Event


class Runner:
    """Starts jobs' controllers on threads and lets any thread cancel or await them."""

    def __init__(
        self,
        controller: Callable[[str], JobController],
        on_end: Callable[[str, State | None], None] = lambda job_id, state: None,
        on_broken: Callable[[str, Exception], None] = lambda job_id, error: None,
    ) -> None:
        """``on_end(job_id, state)`` is called on the job's thread once its controller
        returns, with the state it left the job in (None where it failed);
        ``on_broken(job_id, error)`` where no controller could be made for the job (then
        ``on_end`` follows)."""
        self._controller = controller
        self._on_end = on_end
        self._on_broken = on_broken
        self._running: dict[str, _Running] = {}
        self._lock = threading.Lock()

    def start(self, job_id: str, resume: bool = False) -> None:
        """Run (or, with ``resume``, pick up) a stored job until it ends; returns at once."""
        try:
            controller = self._controller(job_id)
        except StoreUnavailable:
            raise
        except Exception as error:  # a secret gone, an account that cannot be made
            log.error("job %s: no controller could be made for it", job_id, exc_info=error)
            self._on_broken(job_id, error)
            self._on_end(job_id, None)
            return
        done = threading.Event()
        thread = threading.Thread(
            target=self._run,
            args=(job_id, controller, done, resume),
            name=f"job-{job_id}",
            daemon=True,
        )
        with self._lock:
            self._running[job_id] = _Running(controller, thread, done)
        thread.start()

    def _run(
        self, job_id: str, controller: JobController, done: threading.Event, resume: bool
    ) -> None:
        # A job's thread waits out a store outage (its tasks keep running) and then goes on:
        # every exit, and the job's end, is written once the store is back.
        try:
            with patiently():
                self._follow(job_id, controller, resume)
        finally:
            done.set()

    def _follow(self, job_id: str, controller: JobController, resume: bool) -> None:
        state = None
        try:
            state = controller.run(resume)
        except Exception:
            log.exception("job %s: its controller failed", job_id)
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            self._on_end(job_id, state)

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
        """Wait for a job to end; True when it is not running (any more).

        Waits on an Event, never Thread.join: a Ctrl-C inside join() can make a thread
        look finished when it is not.
        """
        with self._lock:
            running = self._running.get(job_id)
        return running is None or running.done.wait(timeout)

    def running(self) -> list[str]:
        with self._lock:
            return list(self._running)

    def shutdown(self, timeout: float | None = None) -> None:
        """Cancel every running job and wait for them to end."""
        for job_id in self.running():
            self.cancel(job_id, "the server is shutting down")
        for job_id in self.running():
            self.wait(job_id, timeout)
