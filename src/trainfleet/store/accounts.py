"""Users, teams and who is in which team with what role; which team owns each queue.

Part of the store (``Store.accounts``): the same database and transactions as the jobs.
Every check of who may do what reads these rows (see ``trainfleet.control.access``).
"""

from __future__ import annotations

import time

from trainfleet.domain.records import TeamRecord, TeamRole, UserRecord
from trainfleet.store import queries, schema
from trainfleet.store.connection import Connection, Transaction
from trainfleet.store.errors import StoreConflict

SELECT_USERS = f"SELECT {queries.columns(schema.USER_COLUMNS)} FROM users"
SELECT_TEAMS = f"SELECT {queries.columns(schema.TEAM_COLUMNS)} FROM teams"
SELECT_MEMBERS = 'SELECT team, "user", role FROM members'


class Accounts:
    """Users, teams and memberships, stored; safe to share by threads."""

    def __init__(self, connection: Connection) -> None:
        self._db = connection

    # -- users ----------------------------------------------------------------

    def add_user(self, user: UserRecord) -> None:
        """Store a new user; StoreConflict if the name is taken."""

        def add(db: Transaction) -> None:
            if db.retried and self._has(db, "users", user.name):
                return  # the try that lost its link had committed
            db.execute(queries.insert("users", schema.USER_COLUMNS), user.to_dict())

        self._db.write(add)

    def get_user(self, name: str) -> UserRecord | None:
        rows = self._db.rows(f"{SELECT_USERS} WHERE name = :name", {"name": name})
        return UserRecord.from_row(rows[0]) if rows else None

    def list_users(self) -> list[UserRecord]:
        return [UserRecord.from_row(row) for row in self._db.rows(f"{SELECT_USERS} ORDER BY name")]

    def disable_user(self, name: str) -> bool:
        """Disable a user: its tokens stop working. False if there is no such enabled user."""
        now = time.time()

        def disable(db: Transaction) -> bool:
            changed = db.execute(
                "UPDATE users SET disabled_at = :now WHERE name = :name AND disabled_at IS NULL",
                {"now": now, "name": name},
            )
            return changed > 0 or (db.retried and self._disabled_at(db, name) == now)

        return self._db.write(disable)

    def memberships(self, user: str) -> dict[str, TeamRole]:
        """The user's teams and its role in each."""
        rows = self._db.rows(f'{SELECT_MEMBERS} WHERE "user" = :user', {"user": user})
        return {row["team"]: TeamRole(row["role"]) for row in rows}

    # -- teams ----------------------------------------------------------------

    def add_team(self, team: TeamRecord, queue_config: str) -> None:
        """Store a new team with its default queue (``queue_config``: that queue's JSON).

        StoreConflict if a team or a queue of that name exists.
        """
        row = {"name": team.default_queue, "config": queue_config, "team": team.name}

        def add(db: Transaction) -> None:
            if db.retried and self._has(db, "teams", team.name):
                return
            if self._has(db, "queues", team.default_queue):
                raise StoreConflict(f"a queue named {team.default_queue!r} exists already")
            db.execute(queries.insert("teams", schema.TEAM_COLUMNS), team.to_dict())
            db.execute(
                "INSERT INTO queues (name, config, updated_at, team) "
                "VALUES (:name, :config, :updated_at, :team)",
                {**row, "updated_at": time.time()},
            )

        self._db.write(add)

    def get_team(self, name: str) -> TeamRecord | None:
        rows = self._db.rows(f"{SELECT_TEAMS} WHERE name = :name", {"name": name})
        if not rows:
            return None
        members = self._db.rows(f"{SELECT_MEMBERS} WHERE team = :team", {"team": name})
        return TeamRecord.from_row({**rows[0], "members": _roles(members)})

    def list_teams(self) -> list[TeamRecord]:
        """Every team with its members, by name."""
        members: dict[str, list[dict[str, str]]] = {}
        for row in self._db.rows(SELECT_MEMBERS):
            members.setdefault(row["team"], []).append(row)
        return [
            TeamRecord.from_row({**row, "members": _roles(members.get(row["name"], []))})
            for row in self._db.rows(f"{SELECT_TEAMS} ORDER BY name")
        ]

    def set_member(self, team: str, user: str, role: TeamRole) -> None:
        """Add ``user`` to ``team`` with ``role``, or change its role there."""
        self._db.write(
            lambda db: db.execute(
                'INSERT INTO members (team, "user", role) VALUES (:team, :user, :role) '
                'ON CONFLICT (team, "user") DO UPDATE SET role = excluded.role',
                {"team": team, "user": user, "role": role.value},
            )
        )

    def remove_member(self, team: str, user: str) -> bool:
        """Take ``user`` out of ``team``; False if it was not in it."""

        def remove(db: Transaction) -> bool:
            key = {"team": team, "user": user}
            return db.execute('DELETE FROM members WHERE team = :team AND "user" = :user', key) > 0

        return self._db.write(remove)

    def queue_teams(self) -> dict[str, str]:
        """The team of every stored queue, by queue name."""
        return {row["name"]: row["team"] for row in self._db.rows("SELECT name, team FROM queues")}

    @staticmethod
    def _has(db: Transaction, table: str, name: str) -> bool:
        return bool(db.rows(f"SELECT name FROM {table} WHERE name = :name", {"name": name}))

    @staticmethod
    def _disabled_at(db: Transaction, name: str) -> float | None:
        rows = db.rows("SELECT disabled_at FROM users WHERE name = :name", {"name": name})
        return rows[0]["disabled_at"] if rows else None


def _roles(rows: list[dict[str, str]]) -> dict[str, TeamRole]:
    return {row["user"]: TeamRole(row["role"]) for row in sorted(rows, key=lambda r: r["user"])}
