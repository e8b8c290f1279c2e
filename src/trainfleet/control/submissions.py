"""New jobs stored many per transaction (group commit), behind the answers that wait for
them.

A burst of submissions (a sweep, a pipeline's thousand jobs) came one transaction each,
every one waiting its turn for the store's lock on the thread that serves requests. Here a
submission is queued and its caller waits on a future; one thread writes what was queued
meanwhile in one transaction, then hands the stored jobs on (to the scheduler) together.
A batch the store refuses is written again a job at a time, so that each caller learns its
own job's fate (a taken id, a full disk) and no other's.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from trainfleet.domain.records import JobRecord, TaskRecord
from trainfleet.spec.models import JobSpec
from trainfleet.store.database import Store

log = logging.getLogger(__name__)

BATCH = 256
"""Most jobs one transaction stores."""


@dataclass
class NewJob:
    """A job to store, and the future its submitter waits on."""

    job: JobRecord
    tasks: Sequence[TaskRecord]
    spec: JobSpec
    key: str | None = None
    """Its submission key (``Store.add_job``)."""
    stored: Future[JobRecord] = field(default_factory=Future)


class SubmissionWriter:
    """Stores queued ``NewJob``s on its own thread, many per transaction; ``then`` gets
    each stored batch (before their futures are done); ``before()`` is called before each
    write (it waits while no job may be stored)."""

    def __init__(
        self,
        store: Store,
        then: Callable[[Sequence[NewJob]], None],
        before: Callable[[], object] = lambda: None,
    ) -> None:
        self.store = store
        self.then = then
        self.before = before
        self._queue: queue.SimpleQueue[NewJob] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="submissions", daemon=True)
        self._started = threading.Lock()

    def add(self, new: NewJob) -> Future[JobRecord]:
        """Queue ``new`` to be stored; its future is the stored job, or why it is not."""
        with self._started:
            if not self._thread.is_alive():
                self._thread.start()
        self._queue.put(new)
        return new.stored

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self.before()
            self._write(batch)

    def _write(self, batch: list[NewJob]) -> None:
        try:
            keys = {new.job.id: new.key for new in batch if new.key is not None}
            self.store.add_jobs([(new.job, new.tasks) for new in batch], keys)
        except Exception as error:
            if len(batch) == 1:
                batch[0].stored.set_exception(error)
            else:  # each alone: one job's fault is its own
                for new in batch:
                    self._write([new])
            return
        try:
            self.then(batch)
        except Exception:  # stored all the same: the next server's resume queues them
            log.exception("stored jobs not queued: %s", ", ".join(n.job.id for n in batch))
        for new in batch:
            new.stored.set_result(new.job)
