"""Audit records written behind the answers, many per transaction (group commit).

A record a request made is queued at once and written by one thread of its own, with the
records queued meanwhile, in one transaction: a submission pays for a queue append, not
for a second transaction that would wait on the first for the store's lock. Reading the
trail waits for what is queued (``flush``); a stopping server writes it all. A process
killed with SIGKILL loses the few records not written yet (milliseconds' worth).
"""

from __future__ import annotations

import logging
import queue
import threading

from trainfleet.domain.records import AuditRecord
from trainfleet.store.audit import AuditTrail

log = logging.getLogger("trainfleet.audit")

QUEUED = 10_000
"""Most records waiting (a store that cannot answer for a long while): then a request
waits for room."""
BATCH = 500
"""Most records one transaction writes."""


class AuditWriter:
    """Writes the queued records of ``trail`` on its own thread."""

    def __init__(self, trail: AuditTrail) -> None:
        self.trail = trail
        self._queue: queue.Queue[AuditRecord] = queue.Queue(maxsize=QUEUED)
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    def put(self, record: AuditRecord, wait: bool = False) -> bool:
        """Queue ``record``; False when the queue is full and ``wait`` is not given."""
        try:
            self._queue.put(record, block=wait)
        except queue.Full:
            return False
        return True

    def flush(self) -> None:
        """Wait until every record queued so far is written (or logged, if it could not be)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.trail.record_many(batch)  # never raises; logs what it cannot store
            except Exception:  # a bug must not stop the trail: say so, and go on
                log.exception("audit records lost: %d", len(batch))
            finally:
                for _ in batch:
                    self._queue.task_done()
