"""The audit trail: who changed what, when, from where, and how it ended; append-only.

Part of the store (``Store.audit``), in the same database as what it records. There is
no method to change a record: records are added and read, and removed only once older than
the server's retention (``prune``, itself recorded by the server).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from typing import Any

from trainfleet.domain.records import AuditRecord
from trainfleet.store import queries, schema
from trainfleet.store.connection import Connection, Transaction

log = logging.getLogger("trainfleet.audit")

MAX_TEXT = 500
"""The most characters a text field of a record keeps."""
SELECT_AUDIT = f"SELECT {queries.columns(('id', *schema.AUDIT_COLUMNS))} FROM audit"
PRUNE_BATCH = 5000
"""The most records one transaction of a pruning removes: other writers wait for one batch
at most, however many records are due."""
PRUNE = "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE time < :before LIMIT :batch)"
SAME_RECORD = (
    'SELECT id FROM audit WHERE time = :time AND "user" = :user AND action = :action '
    "AND target = :target"
)


class AuditTrail:
    """Audit records, stored; safe to share by threads."""

    def __init__(self, connection: Connection) -> None:
        self._db = connection

    def record(self, entry: AuditRecord) -> bool:
        """Add ``entry``; see ``record_many``."""
        return self.record_many([entry])

    def record_many(self, entries: Sequence[AuditRecord]) -> bool:
        """Add ``entries`` in one transaction, in their order (ids are the store's to give;
        texts are cut at MAX_TEXT characters). Never raises: where the store cannot take
        them, even after the connection's retries, every record goes to the log as a
        warning, and False says so. A change must not fail for its record."""
        rows = [
            {
                name: _storable(value) if isinstance(value, str) else value
                for name, value in entry.to_dict(exclude={"id"}).items()
            }
            for entry in entries
        ]

        def add(db: Transaction) -> None:
            if db.retried and db.rows(SAME_RECORD, rows[0]):
                return  # the try that lost its link had committed
            db.execute_many(queries.insert("audit", schema.AUDIT_COLUMNS), rows)

        try:
            self._db.write(add)
        except Exception as error:
            for row in rows:
                log.warning("audit record not stored (%s): %s", error, json.dumps(row))
            return False
        return True

    def prune(self, before: float) -> int:
        """Remove every record older than ``before`` (Unix time), ``PRUNE_BATCH`` per
        transaction; how many were removed. StoreError where the store cannot answer."""
        params = {"before": before, "batch": PRUNE_BATCH}
        removed = 0
        while True:
            count = self._db.write(lambda db: db.execute(PRUNE, params))
            removed += count
            if count < PRUNE_BATCH:
                return removed

    def find(
        self,
        *,
        user: str | None = None,
        action: str | None = None,
        since: float | None = None,
        teams: Collection[str] | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[AuditRecord]:
        """At most ``limit`` records, newest first, that match every filter given.

        ``action``: that action, or every action under it (``job``: ``job.submit``, ...);
        ``since``: at or after this Unix time; ``teams``: of one of these teams (None: of
        any team or none); ``before_id``: older than that record (the next page).
        """
        if teams is not None and not teams:
            return []
        conditions: list[str] = []
        params: dict[str, Any] = {"limit": limit}
        if user is not None:
            conditions.append('"user" = :user')
            params["user"] = user
        if action is not None:
            conditions.append("(action = :action OR action LIKE :under ESCAPE '!')")
            params["action"], params["under"] = action, _escaped(action) + ".%"
        if since is not None:
            conditions.append("time >= :since")
            params["since"] = since
        if teams is not None:
            listed, names = queries.in_list("team", sorted(teams))
            conditions.append(f"team IN {listed}")
            params.update(names)
        if before_id is not None:
            conditions.append("id < :before")
            params["before"] = before_id
        where = "WHERE " + " AND ".join(conditions) if conditions else ""
        rows = self._db.rows(f"{SELECT_AUDIT} {where} ORDER BY id DESC LIMIT :limit", params)
        return [AuditRecord.from_row(row) for row in rows]


def _storable(text: str) -> str:
    """``text`` as either database takes it (no NUL, valid UTF-8), at most MAX_TEXT long."""
    text = text.replace("\0", "\\0").encode("utf-8", "replace").decode()
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _escaped(text: str) -> str:
    """``text`` matched literally by LIKE ... ESCAPE '!'."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
