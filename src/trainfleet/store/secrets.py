"""Teams' secrets as stored: encrypted values, clear key names (see ``trainfleet.vault``).

Part of the store (``Store.secrets``). Nothing here encrypts or decrypts: rows come in and
go out as they are kept.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from trainfleet.domain.records import SecretRecord
from trainfleet.store import queries, schema
from trainfleet.store.connection import Connection, Row, Transaction
from trainfleet.store.errors import StoreConflict

SELECT = f"SELECT {queries.columns(schema.SECRET_COLUMNS)} FROM secrets"
KEY = "team = :team AND name = :name"


class SecretStore:
    """Teams' secrets; safe to share by threads."""

    def __init__(self, connection: Connection) -> None:
        self._db = connection

    def add(self, secret: SecretRecord) -> None:
        """Store a new secret; StoreConflict if its team has one of that name."""
        row = {**secret.to_dict(), "keys": json.dumps(secret.keys)}

        def add(db: Transaction) -> None:
            if db.rows(f"SELECT name FROM secrets WHERE {KEY}", row):
                if db.retried:
                    return  # the try that lost its link had committed
                raise StoreConflict(f"team {secret.team!r} has a secret {secret.name!r} already")
            db.execute(queries.insert("secrets", schema.SECRET_COLUMNS), row)

        self._db.write(add)

    def get(self, team: str, name: str) -> SecretRecord | None:
        rows = self._db.rows(f"{SELECT} WHERE {KEY}", {"team": team, "name": name})
        return _record(rows[0]) if rows else None

    def list(self, teams: Collection[str] | None = None) -> list[SecretRecord]:
        """The secrets of ``teams`` (of every team: None), by team and name."""
        if teams is not None and not teams:
            return []
        where, params = "", dict[str, str]()
        if teams is not None:
            listed, params = queries.in_list("team", sorted(teams))
            where = f"WHERE team IN {listed}"
        rows = self._db.rows(f"{SELECT} {where} ORDER BY team, name", params)
        return [_record(row) for row in rows]

    def delete(self, team: str, name: str) -> bool:
        """Forget a secret; False if there was none."""
        key = {"team": team, "name": name}
        return self._db.write(lambda db: db.execute(f"DELETE FROM secrets WHERE {KEY}", key) > 0)

    def replace_data(self, team: str, name: str, data: str) -> None:
        """Store a secret's values encrypted anew (a key rotation), the same values."""
        params: dict[str, Any] = {"team": team, "name": name, "data": data}
        self._db.write(
            lambda db: db.execute(f"UPDATE secrets SET data = :data WHERE {KEY}", params)
        )


def _record(row: Row) -> SecretRecord:
    return SecretRecord.from_row({**row, "keys": json.loads(row["keys"])})
