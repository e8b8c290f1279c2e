"""What an operator does on the server's machine, on its store directly: ``trainfleet
token`` (tokens, and the users they are for) and ``trainfleet secret rotate-key``.

Like a database's admin commands, these need no server: they run with the server's data
directory (or database URL). Each change is recorded in the audit trail, its source
``local`` and its user none (``by`` says who, in the detail).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from trainfleet.control.services.accounts import LOCAL, Accounts
from trainfleet.control.services.audit import AuditLog
from trainfleet.control.services.ownership import DEFAULT_TEAM
from trainfleet.control.settings import data_dir_of
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.errors import BadInput
from trainfleet.domain.records import Audited, AuditRecord, TeamRole, TokenRecord, UserRecord
from trainfleet.store.errors import StoreConflict, StoreError
from trainfleet.wire import NAME_PATTERN

if TYPE_CHECKING:
    from trainfleet.store.database import Store


class Operator:
    """The server's store, opened on its machine."""

    def __init__(self, store: Store, data_dir: DataDir) -> None:
        self.store = store
        self.data_dir = data_dir
        self.audit = AuditLog(store.audit)
        self.accounts = Accounts(store, self.audit)

    @classmethod
    def open(cls, data_dir: str | None, database: str | None) -> Operator:
        """The server's store: ``database`` (a URL) or the data directory's SQLite file;
        BadInput where there is none, or it cannot be opened."""
        from trainfleet.store.database import Store

        root = data_dir_of(data_dir)
        if database is None and not root.database.exists():
            raise BadInput(f"no trainfleet data in {root.root} (give the server's --data-dir)")
        try:
            return cls(Store.open(database or root.database), root)
        except StoreError as error:
            raise BadInput(str(error)) from None

    def __enter__(self) -> Operator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def list_tokens(self) -> list[TokenRecord]:
        """Every token, revoked ones included, oldest first."""
        return self.accounts.tokens()

    def create_token(
        self, name: str, owner: str | None, admin: bool, by: str
    ) -> tuple[TokenRecord, str]:
        """A new token named ``name`` of user ``owner`` (by default the user ``name``, made
        now if missing, an administrator with ``admin``, else a member of team
        ``default``): its stored record and the secret, to show once."""
        if not re.fullmatch(NAME_PATTERN, name):
            raise BadInput(f"token name {name!r}: use lower-case letters, digits, '.' and '-'")
        users = self.store.accounts
        user = users.get_user(owner or name)
        if owner is not None and user is None:
            raise BadInput(f"--user: no user {owner!r} (see trainfleet user list)")
        if user is None:
            user = UserRecord(name=name, admin=admin, created_at=time.time())
            users.add_user(user)
            if not admin:
                users.set_member(DEFAULT_TEAM, name, TeamRole.MEMBER)
            kind = "an administrator" if admin else f"member of team {DEFAULT_TEAM}"
            team = "" if admin else DEFAULT_TEAM
            self._record(Audited.USER_CREATE, name, kind, by, team=team)
        elif admin and not user.admin:
            raise BadInput(f"--admin: user {user.name!r} exists and is not an administrator")
        record, secret = self.accounts.issue(name, user.name)
        try:
            self.store.add_token(record)
        except StoreConflict as error:
            raise BadInput(str(error)) from None
        self._record(Audited.TOKEN_CREATE, record.id, f"named {name} of user {user.name}", by)
        return record, secret

    def revoke_token(self, token_id: str, by: str) -> None:
        """Revoke a token, whoever's it is; BadInput if there is none, or it is revoked."""
        known = self.accounts.token(token_id)
        if known is None:
            raise BadInput(f"no token {token_id!r} (see trainfleet token list)")
        if not self.store.revoke_token(token_id):
            raise BadInput(f"token {token_id} ({known.name}) is revoked already")
        self._record(Audited.TOKEN_REVOKE, token_id, f"of user {known.user}", by)

    def rotate_secret_key(self) -> int:
        """A new first key in the data directory's key file, and every secret encrypted with
        it; how many were encrypted again. The old keys stay, so that values sealed by a
        process that has not read the file since still open; drop them by hand later."""
        from trainfleet.vault.keys import KEY_FILE, rotate_key_file
        from trainfleet.vault.secrets import KeySource, Secrets

        root = self.data_dir.root
        rotate_key_file(root / KEY_FILE)
        # The file's keys: the CLI refuses a rotation while TRAINFLEET_SECRET_KEY gives them.
        return Secrets(self.store, KeySource(root, {})).rotate()

    def _record(self, action: Audited, target: str, detail: str, by: str, team: str = "") -> None:
        self.audit.record(
            AuditRecord(
                time=time.time(),
                action=action,
                target=target,
                team=team,
                source=LOCAL,
                detail=f"{detail}; by {by}",
            )
        )
