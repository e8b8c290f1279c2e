"""Schema revisions: read the database's revision in one query, upgrade only when behind.

The revisions live in ``migrations/versions`` as Alembic scripts. Opening a store whose
schema is current costs one ``SELECT`` and imports neither SQLAlchemy nor Alembic; both are
imported only when there is something to upgrade. To add a revision, copy the last one in
``migrations/versions``, point its ``down_revision`` at it, and append it to ``REVISIONS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainfleet.store.errors import MissingTable, StoreError
from trainfleet.store.targets import Target

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

    from trainfleet.store.connection import Connection

REVISIONS = (
    "0001", "0002", "0003", "0004", "0005", "0006", "0007", "0008", "0009", "0010", "0011",
)  # fmt: skip
"""Every revision this trainfleet knows, oldest first (checked against Alembic by a test)."""
HEAD = REVISIONS[-1]
MIGRATIONS = Path(__file__).with_name("migrations")


def current_revision(connection: Connection) -> str | None:
    """The database's schema revision; None for an empty database."""
    try:
        rows = connection.rows("SELECT version_num FROM alembic_version")
    except MissingTable:
        return None
    if len(rows) > 1:
        found = ", ".join(sorted(str(row["version_num"]) for row in rows))
        raise StoreError(f"the store {connection.target} has several schema revisions: {found}")
    return str(rows[0]["version_num"]) if rows else None


def ensure_current(connection: Connection) -> None:
    """Bring the database to HEAD; StoreError when a newer trainfleet already went past it."""
    revision = current_revision(connection)
    if revision == HEAD:
        return
    _refuse_unknown(connection.target, revision)
    upgrade(connection.target)
    revision = current_revision(connection)
    _refuse_unknown(connection.target, revision)  # a newer trainfleet may have raced us


def check_current(connection: Connection) -> None:
    """StoreError unless the database is at HEAD (a reader that may not upgrade it)."""
    revision = current_revision(connection)
    if revision != HEAD:
        _refuse_unknown(connection.target, revision)
        raise StoreError(
            f"the store {connection.target} is at schema {revision}, not {HEAD}: open it "
            "for writing once (any trainfleet command does) to bring it up to date"
        )


def upgrade(target: Target, revision: str = "head") -> None:
    """Run Alembic's upgrade of ``target`` to ``revision`` (all pending ones by default)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["url"] = sqlalchemy_url(target)
    command.upgrade(config, revision)


def sqlalchemy_url(target: Target) -> URL:
    """The same database as SQLAlchemy (and so Alembic) names it."""
    from sqlalchemy.engine import URL, make_url

    if target.kind == "sqlite":
        return URL.create("sqlite", database=str(target.path))
    return make_url(target.url).set(drivername="postgresql+psycopg")


def _refuse_unknown(target: Target, revision: str | None) -> None:
    if revision is not None and revision not in REVISIONS:
        raise StoreError(
            f"the store {target} has schema revision {revision!r}, newer than this trainfleet "
            f"knows (up to {HEAD!r}): upgrade trainfleet to use it"
        )
