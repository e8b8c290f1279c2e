"""The audit trail: records written behind the answers, many per transaction (group
commit); read by those ``access.RULES`` let; with a retention, old records pruned
(``AuditPruner``).

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
import time
from datetime import UTC, datetime
from functools import cached_property

from trainfleet.control.access import Action, Caller
from trainfleet.domain.records import Audited, AuditRecord
from trainfleet.store.audit import AuditTrail
from trainfleet.store.errors import StoreError
from trainfleet.wire import AuditPage

log = logging.getLogger("trainfleet.audit")

QUEUED = 10_000
"""Most records waiting (a store that cannot answer for a long while): then a request
waits for room."""
BATCH = 500
"""Most records one transaction writes."""
GATHER = 0.05
"""Fewest seconds between two of the writer's transactions: a burst of requests (one record
each, milliseconds apart) is written a few dozen records at a time, not one transaction per
record queued behind the requests' own for the store's lock."""
DAY = 86_400.0
"""Seconds in a day: the unit of a retention, and how often a pruner prunes."""
STOP_WAIT = 10.0
"""Seconds a stopping server waits for a pruning under way (its batch) to end."""


class AuditLog:
    """One store's audit trail: records written at once (``record``) or behind an answer
    (``writer``), and read a page at a time (``read``)."""

    def __init__(self, trail: AuditTrail) -> None:
        self.trail = trail

    @cached_property
    def writer(self) -> AuditWriter:
        """The thread that writes queued records, started on first use."""
        return AuditWriter(self.trail)

    def record(self, entry: AuditRecord) -> None:
        """Write ``entry`` now (a change made on the server's machine, not by a request)."""
        self.trail.record(entry)

    def read(
        self,
        caller: Caller,
        *,
        user: str | None = None,
        action: str | None = None,
        since: float | None = None,
        team: str | None = None,
        limit: int = 100,
        before: int | None = None,
    ) -> AuditPage:
        """Records newest first, one page: every one for an administrator, those of the
        teams where the caller is a team-admin for a team-admin (NotFound for a team it
        does not see, Forbidden for a caller who is neither)."""
        if team is not None:
            caller.require(Action.READ_AUDIT, team, missing=f"no team {team!r}")
            teams: list[str] | None = [team]
        else:
            teams = caller.teams_allowed(Action.READ_AUDIT)
        self.writer.flush()
        found = self.trail.find(
            user=user, action=action, since=since, teams=teams, limit=limit + 1, before_id=before
        )
        records = found[:limit]
        more = len(found) > limit
        return AuditPage(records=records, next_before=records[-1].id if more else None)


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
        written = -GATHER
        while True:
            batch = [self._queue.get()]
            time.sleep(max(0.0, written + GATHER - time.monotonic()))
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
                written = time.monotonic()
                for _ in batch:
                    self._queue.task_done()


class AuditPruner:
    """Removes the records of ``trail`` older than ``days`` once started, then every
    ``interval`` seconds, on its own thread until ``stop``; each pruning adds a record of
    itself (``audit.prune``: how many were removed, up to when)."""

    def __init__(self, trail: AuditTrail, days: float, interval: float = DAY) -> None:
        self.trail = trail
        self.days = days
        self.interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="audit-pruner", daemon=True)

    def __enter__(self) -> AuditPruner:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Prune no more; wait (a while) for a pruning under way to end."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT)

    def prune(self, now: float | None = None) -> int:
        """Remove the records older than the retention, now, and record that; how many."""
        now = time.time() if now is None else now
        before = now - self.days * DAY
        removed = self.trail.prune(before)
        up_to = datetime.fromtimestamp(before, UTC).isoformat(timespec="seconds")
        detail = f"removed {removed} record(s) older than {up_to} (retention {self.days:g} days)"
        self.trail.record(AuditRecord(time=now, action=Audited.AUDIT_PRUNE, detail=detail))
        return removed

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.prune()
            except StoreError as error:  # the store cannot answer: try again next time
                log.warning("audit records not pruned: %s", error)
            except Exception:  # a bug must not stop the pruning: say so, and go on
                log.exception("audit records not pruned")
            self._stopped.wait(self.interval)
