"""Alembic's environment: upgrades the database that ``trainfleet.store.migrate`` hands over.

Every pending revision runs in one transaction that first takes the database's write lock
(SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: an advisory lock), so stores that open the same
new database at once migrate it exactly once, and a failed upgrade leaves nothing behind.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

MIGRATION_LOCK = 0x74726169_6E666C74  # "trainflt": PostgreSQL's advisory lock key


def _autocommit(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # sqlite3 must not open transactions by itself


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def run_migrations() -> None:
    if context.is_offline_mode():
        raise RuntimeError("trainfleet's store migrates online only")
    url = context.config.attributes["url"]
    sqlite = url.get_backend_name() == "sqlite"
    engine = create_engine(
        url,
        poolclass=NullPool,
        connect_args={"timeout": 30} if sqlite else {"connect_timeout": 10},
    )
    if sqlite:
        event.listen(engine, "connect", _autocommit)
        event.listen(engine, "begin", _begin_immediate)
    try:
        with engine.connect() as connection, connection.begin():
            if not sqlite:
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK}
                )
            context.configure(connection=connection)
            context.run_migrations()
    finally:
        engine.dispose()


run_migrations()
