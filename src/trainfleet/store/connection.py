"""One DB-API connection shared by a store's threads: a lock, transactions, and clear errors."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from trainfleet.store.dialects import Dialect, dialect_of
from trainfleet.store.errors import MissingTable, StoreConflict, StoreError
from trainfleet.store.targets import Target

Row = dict[str, Any]
Params = Mapping[str, Any]
T = TypeVar("T")


class Transaction:
    """The statements of one transaction; the connection's lock is held throughout."""

    def __init__(self, connection: Any, dialect: Dialect) -> None:
        self._connection = connection
        self._dialect = dialect

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

    Driver errors come out as StoreError (StoreConflict for a duplicate key, MissingTable for
    an unknown table). A lost PostgreSQL connection is opened again on its next use.
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.dialect = dialect_of(target)
        self._connection = self.dialect.connect(target)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        with self._lock, self._errors():
            connection = self._retrying(self._begin)
            try:
                yield Transaction(connection, self.dialect)
                connection.execute("COMMIT")
            except BaseException:
                self._rollback(connection)  # also after a failed COMMIT, which may leave it open
                raise

    def rows(self, query: str, params: Params | None = None) -> list[Row]:
        """The rows of one read (in autocommit: it sees every committed change)."""
        with self._lock, self._errors():
            return self._retrying(lambda link: Transaction(link, self.dialect).rows(query, params))

    def _begin(self, connection: Any) -> Any:
        connection.execute(self.dialect.begin)
        return connection

    def _rollback(self, connection: Any) -> None:
        """Undo the open transaction, unless the database already did (or the link is gone)."""
        try:
            connection.execute("ROLLBACK")
        except Exception as error:
            if not self.dialect.is_driver_error(error):
                raise

    def _retrying(self, use: Callable[[Any], T]) -> T:
        """``use(connection)``, once more on a new connection if the old one was lost.

        Only for what is safe to repeat: a read, or the BEGIN that opens a transaction.
        """
        connection = self._live()
        try:
            return use(connection)
        except Exception:
            if not self.dialect.broken(connection):
                raise
        return use(self._live())

    def _live(self) -> Any:
        if self.dialect.broken(self._connection):
            self._connection = self.dialect.connect(self.target)
        return self._connection

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except StoreError:
            raise
        except Exception as error:
            if not self.dialect.is_driver_error(error):
                raise
            if self.dialect.is_conflict(error):
                raise StoreConflict(f"already stored: {error}") from error
            if self.dialect.is_missing_table(error):
                raise MissingTable(str(error)) from error
            raise StoreError(f"the store {self.target} failed: {error}") from error
