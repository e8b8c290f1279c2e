"""``trainfleet token``: API tokens, made and revoked in the server's store directly.

There is no token API: like a database admin command, these run on the server's machine
with the server's ``--data-dir`` (or ``--database-url``). A new token is printed once; the
store keeps only its digest.
"""

from __future__ import annotations

import datetime
import getpass
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager

import click

from trainfleet.cli.errors import UserError
from trainfleet.cli.tables import print_rows
from trainfleet.control.settings import data_dir_of
from trainfleet.domain.records import Audited, AuditRecord, TeamRole, TokenRecord, UserRecord
from trainfleet.server.auth import LOCAL, new_record, new_token
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreConflict, StoreError
from trainfleet.wire import NAME_PATTERN


@contextmanager
def store_of(data_dir: str | None, database: str | None) -> Iterator[Store]:
    """The server's store: ``database`` (a URL) or the data directory's SQLite file."""
    root = data_dir_of(data_dir)
    if database is None and not root.database.exists():
        raise UserError(f"no trainfleet data in {root.root} (give the server's --data-dir)")
    try:
        store = Store.open(database or root.database)
    except StoreError as error:
        raise UserError(str(error)) from None
    try:
        yield store
    finally:
        store.close()


def create(store: Store, name: str, owner: str | None, admin: bool) -> tuple[TokenRecord, str]:
    """A new token named ``name`` of user ``owner`` (by default the user ``name``, made
    now if missing, an administrator with ``admin``, else a member of team ``default``):
    its stored record and the secret, to show once."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise UserError(f"token name {name!r}: use lower-case letters, digits, '.' and '-'")
    user = store.accounts.get_user(owner or name)
    if owner is not None and user is None:
        raise UserError(f"--user: no user {owner!r} (see trainfleet user list)")
    if user is None:
        user = UserRecord(name=name, admin=admin, created_at=time.time())
        store.accounts.add_user(user)
        if not admin:
            store.accounts.set_member("default", name, TeamRole.MEMBER)
        kind = "an administrator" if admin else "member of team default"
        _audit(store, Audited.USER_CREATE, name, kind, team="" if admin else "default")
    elif admin and not user.admin:
        raise UserError(f"--admin: user {user.name!r} exists and is not an administrator")
    token = new_token()
    record = new_record(name, token, user.name)
    try:
        store.add_token(record)
    except StoreConflict as error:
        raise UserError(str(error)) from None
    _audit(store, Audited.TOKEN_CREATE, record.id, f"named {name} of user {user.name}")
    return record, token


def revoke(store: Store, token_id: str) -> None:
    known = store.get_token(token_id)
    if known is None:
        raise UserError(f"no token {token_id!r} (see trainfleet token list)")
    if not store.revoke_token(token_id):
        raise UserError(f"token {token_id} ({known.name}) is revoked already")
    _audit(store, Audited.TOKEN_REVOKE, token_id, f"of user {known.user}")


def _audit(store: Store, action: Audited, target: str, detail: str, team: str = "") -> None:
    """Record a change made here, in the store directly: its source is ``local``, its
    user none (the operator's login is in the detail)."""
    try:
        login = getpass.getuser()
    except (OSError, KeyError):
        login = "?"
    store.audit.record(
        AuditRecord(
            time=time.time(),
            action=action,
            target=target,
            team=team,
            source=LOCAL,
            detail=f"{detail}; by {login} with trainfleet token",
        )
    )


def show(tokens: list[TokenRecord], output: str) -> None:
    """The tokens as a table, or as JSON/YAML (never their digests)."""
    rows = [token.to_dict(exclude={"digest", "admin"}) for token in tokens]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
    elif output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(rows, sort_keys=False), nl=False)
    else:
        lines = [("ID", "NAME", "USER", "CREATED", "REVOKED")] + [
            (t.id, t.name, t.user, _when(t.created_at), _when(t.revoked_at)) for t in tokens
        ]
        print_rows(lines)


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def rotate_secret_key(store: Store, data_dir: str | None) -> int:
    """A new first key in the data directory's key file, and every secret encrypted with
    it; how many were encrypted again. The old keys stay, so that values sealed by a
    process that has not read the file since still open; drop them by hand later."""
    import os

    from trainfleet.vault.keys import KEY_FILE, KEY_VARIABLE, rotate_key_file
    from trainfleet.vault.secrets import KeySource, Secrets

    if os.environ.get(KEY_VARIABLE, "").strip():
        raise UserError(
            f"the keys come from {KEY_VARIABLE}: put a new key first in it (keeping the old), "
            "restart the server, and it encrypts the secrets again"
        )
    root = data_dir_of(data_dir).root
    rotate_key_file(root / KEY_FILE)
    return Secrets(store, KeySource(root)).rotate()
