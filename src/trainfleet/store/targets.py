"""Where a store lives: a SQLite file or a PostgreSQL database, named by a path or a URL.

``/var/lib/trainfleet/trainfleet.db`` and ``sqlite:///relative/path.db`` (``sqlite:////abs``
for an absolute path, as SQLAlchemy writes it) are SQLite files;
``postgresql://user:password@host:port/database`` is a PostgreSQL database (psycopg 3).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from trainfleet.store.errors import StoreError

Kind = Literal["sqlite", "postgresql"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")


@dataclass(frozen=True, repr=False)
class Target:
    """A parsed store location: a SQLite ``path`` or a libpq ``url`` for PostgreSQL."""

    kind: Kind
    path: Path | None = None
    url: str = ""

    def __str__(self) -> str:
        """The location with any password hidden, for messages."""
        if self.kind == "sqlite":
            return str(self.path)
        parts = urlsplit(self.url)
        if parts.password is None:
            return self.url
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))

    def __repr__(self) -> str:
        return f"Target({self.kind}, {self})"


def parse_target(target: str | os.PathLike[str]) -> Target:
    """A path or URL as a Target; raises StoreError for a scheme the store cannot use."""
    if isinstance(target, os.PathLike):
        return Target("sqlite", path=Path(target))
    scheme = _SCHEME.match(target)
    if scheme is None:
        return Target("sqlite", path=Path(target))
    name = scheme.group(1).lower()
    rest = target[scheme.end() :]
    if name in _POSTGRES_SCHEMES:
        return Target("postgresql", url="postgresql://" + rest)
    if name in ("sqlite", "sqlite+pysqlite"):
        path = rest[1:] if rest.startswith("/") else rest  # sqlite:///x -> x, sqlite:////x -> /x
        if not path or path == ":memory:" or "?" in path:
            raise StoreError(f"a SQLite store needs a file path, not {target!r}")
        return Target("sqlite", path=Path(path))
    raise StoreError(
        f"unsupported database URL scheme {name!r}: use a file path, sqlite:///path "
        "or postgresql://user:password@host:port/database"
    )
