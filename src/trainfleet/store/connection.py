"""One DB-API connection shared by a store's threads: a lock, transactions, retries, clear errors.

A call that finds the database unreachable (stopped, restarting, the link cut) tries again
with backoff: for ``WAIT`` seconds by default, then it raises StoreUnavailable (a request
answers 503 rather than hanging); on a thread inside ``patiently()`` (a job's controller,
the admitter) until the database is back. While an outage is known, a call that is not
patient tries once and gives up at once: requests (some run on the server's event loop)
never queue up behind it. An outage is logged once when it begins and once when it ends,
whatever the number of calls that waited on it.

A database that hangs instead of refusing (its processes stopped, its host frozen, the
network gone quiet) is caught too: a call that holds the connection longer than
``STATEMENT_WAIT`` has its link cut by a watchdog, and while the database hangs the
connection is opened again by a thread of its own, never by a caller: no caller (nor the
server's event loop) waits on a database that does not answer for longer than that.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from trainfleet.store.dialects import Dialect, dialect_of
from trainfleet.store.errors import MissingTable, StoreConflict, StoreError, StoreUnavailable
from trainfleet.store.targets import Target

Row = dict[str, Any]
Params = Mapping[str, Any]
T = TypeVar("T")

WAIT = 2.0
"""Seconds a call waits for an unreachable database before it raises StoreUnavailable."""
STATEMENT_WAIT = 5.0
"""Seconds one call may hold the connection (every statement of this store takes
milliseconds) before a watchdog cuts its link, where the dialect can (PostgreSQL)."""
SLOW_CONNECT = 1.0
"""Seconds a failed connection attempt takes that tell a database that hangs from one that
refuses (which fails at once)."""
BACKOFF_FIRST = 0.05
BACKOFF_MOST = 1.0
"""Seconds between two tries: from the first, doubling (with jitter) up to the most."""

log = logging.getLogger("trainfleet.store")
_patience = threading.local()


@contextmanager
def patiently() -> Iterator[None]:
    """Make the store calls of this thread wait out an outage, however long, within the block.

    For background work that has nothing better to do than wait (a job's controller: its
    tasks keep running meanwhile), never for a request that someone waits on.
    """
    before = getattr(_patience, "on", False)
    _patience.on = True
    try:
        yield
    finally:
        _patience.on = before


class Transaction:
    """The statements of one transaction; the connection's lock is held throughout."""

    def __init__(self, connection: Any, dialect: Dialect, retried: bool = False) -> None:
        self._connection = connection
        self._dialect = dialect
        self.retried = retried
        """An earlier try of this transaction lost its link while committing: it may have
        committed (a write that must happen once checks whether it did)."""
        self._in_order = dialect.in_order is None

    def in_order(self) -> None:
        """Make the events this transaction adds take ids after those of every transaction
        that commits before it (once per transaction; see ``Dialect.in_order``)."""
        if not self._in_order:
            self._in_order = True
            self._connection.execute(self._dialect.in_order)

    def execute(self, query: str, params: Params | None = None) -> int:
        """Run one statement; returns how many rows it changed."""
        cursor = self._connection.execute(self._dialect.sql(query), params or {})
        return int(cursor.rowcount)

    def execute_many(self, query: str, rows: Sequence[Params]) -> None:
        if rows:
            self._connection.cursor().executemany(self._dialect.sql(query), rows)

    def rows(self, query: str, params: Params | None = None) -> list[Row]:
        cursor = self._connection.execute(self._dialect.sql(query), params or {})
        return [dict(row) for row in cursor.fetchall()]


class Connection:
    """The store's connection to ``target``: one thread at a time, one transaction per change.

    Driver errors come out as StoreError (StoreUnavailable while the database cannot be
    reached, StoreConflict for a duplicate key, MissingTable for an unknown table). A lost
    connection is opened again on its next use.
    """

    def __init__(self, target: Target, wait: float = WAIT, read_only: bool = False) -> None:
        self.target = target
        self.dialect = dialect_of(target)
        self.wait = wait
        """Seconds a call (off ``patiently()``) waits for an unreachable database."""
        self.read_only = read_only
        """Whether every write is refused (by the database: a process that must write
        nothing, a server's API, finds out in its tests)."""
        self._connection: Any = None
        self._lock = threading.Lock()
        self._down_since: float | None = None
        """When the running outage began (monotonic); None while the database answers."""
        self._held_since: float | None = None
        """Since when a call holds the connection (monotonic), None while none does."""
        self._hangs = False
        """Whether the database was last seen hanging rather than refusing (a call cut by the
        watchdog, a connection attempt that took ``SLOW_CONNECT``): while it does, callers
        leave opening a connection to a thread of our own."""
        self._opened = False
        self._closed = threading.Event()
        self._reconnecting = False
        self._why = ""
        """Why the database could not be reached, last time it could not."""
        self._call(lambda connection: None)  # connect now: a bad URL is told at once
        self._opened = True
        if self.dialect.can_interrupt:
            threading.Thread(target=self._watch, name="store-watchdog", daemon=True).start()

    def close(self) -> None:
        with self._lock:  # the watchdog frees it from a call that hangs: stop it after
            self._closed.set()
            if self._connection is not None:
                self._connection.close()

    def write(self, body: Callable[[Transaction], T]) -> T:
        """``body`` in one transaction, committed when it returns, rolled back if it raises.

        Where the database is unreachable, the whole transaction runs again later, so
        ``body`` must be safe to run more than once (see ``Transaction.retried``).
        """
        maybe_committed = False

        def attempt(connection: Any) -> T:
            nonlocal maybe_committed
            connection.execute(self.dialect.begin)
            try:
                result = body(Transaction(connection, self.dialect, maybe_committed))
                maybe_committed = True
                connection.execute("COMMIT")
            except BaseException:
                self._rollback(connection)  # also after a failed COMMIT, which may leave it open
                raise
            return result

        return self._call(attempt)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A write transaction whose block cannot run twice: only its BEGIN is retried.

        Committed when the block ends, rolled back if it raises. Prefer ``write``.
        """
        deadline = self._deadline(None)

        def begin() -> Any:
            connection = self._hold(deadline)
            try:
                with self._errors(connection):
                    connection.execute(self.dialect.begin)
                self._answered()
            except BaseException:
                self._release()
                raise
            return connection

        connection = self._retrying(begin, deadline)
        try:
            with self._errors(connection):
                try:
                    yield Transaction(connection, self.dialect)
                    connection.execute("COMMIT")
                except BaseException:
                    self._rollback(connection)
                    raise
        finally:
            self._release()

    def rows(
        self, query: str, params: Params | None = None, wait: float | None = None
    ) -> list[Row]:
        """The rows of one read (in autocommit: it sees every committed change).

        ``wait``: seconds to wait for an unreachable database, instead of the usual.
        """
        return self._call(
            lambda connection: Transaction(connection, self.dialect).rows(query, params), wait
        )

    def _call(self, use: Callable[[Any], T], wait: float | None = None) -> T:
        """``use(connection)`` under the lock; tried again while the database is unreachable."""
        deadline = self._deadline(wait)
        return self._retrying(lambda: self._once(use, deadline), deadline)

    def _deadline(self, wait: float | None) -> float:
        if wait is None:
            if getattr(_patience, "on", False):
                wait = math.inf
            else:
                wait = 0.0 if self._down_since is not None else self.wait
        return time.monotonic() + wait

    def _retrying(self, attempt: Callable[[], T], deadline: float) -> T:
        """``attempt()``, then again with backoff on StoreUnavailable until ``deadline``."""
        try:
            return attempt()
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
        import tenacity  # only on the way through an outage: `trainfleet run` starts faster

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(StoreUnavailable),
            wait=tenacity.wait_exponential_jitter(multiplier=BACKOFF_FIRST, max=BACKOFF_MOST),
            stop=lambda _: time.monotonic() >= deadline,
            sleep=lambda seconds: time.sleep(min(seconds, max(0.0, deadline - time.monotonic()))),
            reraise=True,
        )
        return retrying(attempt)

    def _once(self, use: Callable[[Any], T], deadline: float) -> T:
        connection = self._hold(deadline)
        try:
            with self._errors(connection):
                result = use(connection)
            self._answered()
            return result
        finally:
            self._release()

    def _hold(self, deadline: float) -> Any:
        """Take the lock (waiting until ``deadline`` at most) and a live connection."""
        timeout = deadline - time.monotonic()
        if not self._lock.acquire(timeout=-1 if math.isinf(timeout) else max(0.0, timeout)):
            raise StoreUnavailable(f"the store {self.target} did not answer in time")
        try:
            with self._errors(None):
                if self._connection is None or self.dialect.broken(self._connection):
                    self._connection = None
                    if self._down_since is not None and self._hangs and self._opened:
                        self._reconnect_in_background()
                        raise StoreUnavailable(self._why)
                    self._connection = self._connect()
        except BaseException:
            self._lock.release()
            raise
        self._held_since = time.monotonic()
        return self._connection

    def _release(self) -> None:
        self._held_since = None
        self._lock.release()

    def _watch(self) -> None:
        """Cut the link of a call that holds the connection too long (the database hangs)."""
        while not self._closed.wait(STATEMENT_WAIT / 10):
            held_since, connection = self._held_since, self._connection
            if (
                held_since is not None
                and time.monotonic() - held_since > STATEMENT_WAIT
                and held_since == self._held_since  # the same call still
            ):
                log.warning(
                    "the store %s did not answer in %.0f s: its link is cut",
                    self.target,
                    STATEMENT_WAIT,
                )
                self._hangs = True
                self.dialect.interrupt(connection)

    def _connect(self) -> Any:
        started = time.monotonic()
        try:
            connection = self.dialect.connect(self.target)
        except StoreUnavailable:
            self._hangs = time.monotonic() - started >= SLOW_CONNECT
            raise
        self._hangs = False
        if self.read_only:
            connection.execute(self.dialect.read_only)
        return connection

    def _reconnect_in_background(self) -> None:
        """While the database hangs (lock held): open a connection on a thread of our own,
        so that no caller waits on a database that may not answer at all."""
        if self._reconnecting:
            return
        self._reconnecting = True
        threading.Thread(target=self._reconnect, name="store-reconnect", daemon=True).start()

    def _reconnect(self) -> None:
        pause = BACKOFF_FIRST
        try:
            while not self._closed.is_set():
                try:
                    connection = self._connect()
                except StoreUnavailable as error:
                    self._why = str(error)
                    self._closed.wait(pause)
                    pause = min(2 * pause, BACKOFF_MOST)
                    continue
                with self._lock:
                    if self._connection is None:
                        self._connection, connection = connection, None
                if connection is not None:  # another was opened meanwhile
                    connection.close()
                return
        finally:
            self._reconnecting = False

    def _rollback(self, connection: Any) -> None:
        """Undo the open transaction, unless the database already did (or the link is gone)."""
        try:
            connection.execute("ROLLBACK")
        except Exception as error:
            if not self.dialect.is_driver_error(error):
                raise

    @contextmanager
    def _errors(self, connection: Any) -> Iterator[None]:
        """Driver errors as StoreErrors; notes when an outage begins (lock held)."""
        try:
            yield
        except StoreUnavailable as error:
            self._went_down(error)
            raise
        except StoreError:
            raise
        except Exception as error:
            if not self.dialect.is_driver_error(error):
                raise
            lost = connection is not None and self.dialect.broken(connection)
            if lost or self.dialect.is_transient(error):
                unavailable = StoreUnavailable(f"the store {self.target} is unavailable: {error}")
                self._went_down(unavailable)
                raise unavailable from error
            if self.dialect.is_conflict(error):
                raise StoreConflict(f"already stored: {error}") from error
            if self.dialect.is_missing_table(error):
                raise MissingTable(str(error)) from error
            raise StoreError(f"the store {self.target} failed: {error}") from error

    def _answered(self) -> None:
        """The database answered a statement (lock held): an outage, if any, is over."""
        if self._down_since is not None:
            outage = time.monotonic() - self._down_since
            self._down_since = None
            log.warning("the store %s answers again, after %.1f s", self.target, outage)

    def _went_down(self, error: StoreUnavailable) -> None:
        self._why = str(error)
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("%s; waiting for it (calls are retried)", str(error).strip())
