"""What differs between SQLite and PostgreSQL at run time; the store's SQL is the same for both.

The store writes its SQL once, with ``:name`` parameters and every column name quoted
(``"user"`` is reserved in PostgreSQL). A dialect connects, translates the parameter style,
opens transactions and sorts the driver's errors. Table definitions (autoincrement ids,
booleans) live in the Alembic revisions, where SQLAlchemy's types render each database's DDL.
psycopg is imported only when a PostgreSQL store is opened.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainfleet.store.errors import StoreError, StoreUnavailable
from trainfleet.store.targets import Target

CONNECT_TIMEOUT = 3
"""Seconds to wait for a PostgreSQL server to answer a new connection (2 at least)."""

EVENTS_LOCK = 0x7472_6E66_6576
"""The PostgreSQL advisory lock key of adding events ("trnfev")."""

_NAMED_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class Dialect(ABC):
    """One database's way of connecting, binding parameters and reporting errors."""

    begin = "BEGIN"
    """The statement that opens a write transaction."""
    in_order: str | None = None
    """The statement that makes a transaction's events take ids in the order of the
    commits, run before its first event (None where writers take turns anyway)."""
    read_only: str
    """The statement after which a connection refuses every write."""

    @abstractmethod
    def connect(self, target: Target) -> Any:
        """A new DB-API connection in autocommit mode whose rows read as mappings."""

    def sql(self, query: str) -> str:
        """``query`` in the driver's parameter style."""
        return query

    def broken(self, connection: Any) -> bool:
        """Whether ``connection`` was lost and must be opened again."""
        return False

    can_interrupt = False
    """Whether ``interrupt`` can end a call that waits on a database that does not answer."""

    def interrupt(self, connection: Any) -> None:
        """Make the call waiting on ``connection`` fail now (its link is lost)."""
        raise NotImplementedError(f"{type(self).__name__} cannot interrupt a call")

    @abstractmethod
    def is_conflict(self, error: BaseException) -> bool:
        """Whether ``error`` is a unique or primary key violation."""

    @abstractmethod
    def is_missing_table(self, error: BaseException) -> bool:
        """Whether ``error`` says a table does not exist."""

    @abstractmethod
    def is_driver_error(self, error: BaseException) -> bool:
        """Whether ``error`` came from the database driver."""

    @abstractmethod
    def is_transient(self, error: BaseException) -> bool:
        """Whether ``error`` may go away by itself (the database is down, busy or restarting),
        so that the same statements are worth trying again later."""


class SQLite(Dialect):
    """The standard library's sqlite3, in WAL mode; writers take the lock up front."""

    begin = "BEGIN IMMEDIATE"
    read_only = "PRAGMA query_only=ON"

    def connect(self, target: Target) -> sqlite3.Connection:
        assert target.path is not None
        try:
            _create_private(target.path)
            connection = sqlite3.connect(
                target.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            connection.row_factory = sqlite3.Row
            # WAL lets `trainfleet list` read while a job writes; NORMAL stays durable across
            # crashes of the application (only a power loss may drop the last commits).
            _retry_while_locked(lambda: connection.execute("PRAGMA journal_mode=WAL"))
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as error:
            raise StoreError(f"cannot open the store {target}: {error}") from error
        return connection

    def is_conflict(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.IntegrityError) and "UNIQUE" in str(error)

    def is_missing_table(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.OperationalError) and "no such table" in str(error)

    def is_driver_error(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.Error)

    def is_transient(self, error: BaseException) -> bool:
        # A full disk too, as PostgreSQL's DiskFull is an OperationalError: a write waits
        # for room (submissions are refused before, with 507), so that a job's controller
        # records a task's end once space is back instead of failing the job.
        if not isinstance(error, sqlite3.OperationalError):
            return False
        text = str(error)
        return "locked" in text or "busy" in text or error.sqlite_errorcode == sqlite3.SQLITE_FULL


class PostgreSQL(Dialect):
    """psycopg 3 in autocommit mode; transactions are opened with an explicit BEGIN."""

    read_only = "SET default_transaction_read_only = on"

    def connect(self, target: Target) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        try:
            return psycopg.connect(
                target.url, autocommit=True, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT
            )
        except psycopg.Error as error:
            raise StoreUnavailable(f"cannot connect to the store {target}: {error}") from error

    # Sequences hand out ids when rows are inserted, not when they commit: one lock per
    # transaction that adds events, held until it commits, puts both in the same order.
    in_order = f"SELECT pg_advisory_xact_lock({EVENTS_LOCK})"

    def sql(self, query: str) -> str:
        return _pyformat(query)

    def broken(self, connection: Any) -> bool:
        return bool(connection.closed or connection.broken)

    can_interrupt = True

    def interrupt(self, connection: Any) -> None:
        # Shut the socket down under libpq (through a duplicate of its descriptor, which
        # closing leaves libpq's open): the read it waits in ends, the connection is broken.
        import socket

        try:
            with socket.fromfd(
                connection.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM
            ) as link:
                link.shutdown(socket.SHUT_RDWR)
        except Exception as error:  # closed meanwhile: nothing waits on it
            if not isinstance(error, OSError) and not self.is_driver_error(error):
                raise

    def is_conflict(self, error: BaseException) -> bool:
        from psycopg import errors

        return isinstance(error, errors.UniqueViolation)

    def is_missing_table(self, error: BaseException) -> bool:
        from psycopg import errors

        return isinstance(error, errors.UndefinedTable)

    def is_driver_error(self, error: BaseException) -> bool:
        from psycopg import Error

        return isinstance(error, Error)

    def is_transient(self, error: BaseException) -> bool:
        # The server shut down, restarts or cut the link (AdminShutdown, CannotConnectNow),
        # or rolled back a deadlock or serialization failure: all OperationalErrors.
        from psycopg import OperationalError

        return isinstance(error, OperationalError)


def _retry_while_locked(statement: Callable[[], object], timeout: float = 30) -> None:
    """Run ``statement`` again while SQLite says "locked": switching a new file to WAL does
    not wait on the busy timeout when another connection is switching it at the same time."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            statement()
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@lru_cache(maxsize=256)
def _create_private(path: Path) -> None:
    """Create the database file owner-only (0600) before SQLite does: its -wal and -shm
    files take the database's mode."""
    if str(path) != ":memory:":
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def _pyformat(query: str) -> str:
    """``:name`` parameters as ``%(name)s``; a literal ``%`` doubled (``::`` casts stay)."""
    return _NAMED_PARAMETER.sub(r"%(\1)s", query.replace("%", "%%"))


def dialect_of(target: Target) -> Dialect:
    return SQLite() if target.kind == "sqlite" else PostgreSQL()
