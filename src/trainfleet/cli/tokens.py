"""``trainfleet token``: API tokens, made and revoked in the server's store directly (by
``control.services.operator``).

There is no token API: like a database admin command, these run on the server's machine
with the server's ``--data-dir`` (or ``--database-url``). A new token is printed once; the
store keeps only its digest.
"""

from __future__ import annotations

import datetime
import getpass
import json
from collections.abc import Iterator
from contextlib import contextmanager

import click

from trainfleet.cli.errors import UserError
from trainfleet.cli.tables import print_rows
from trainfleet.control.services.operator import Operator
from trainfleet.domain.records import TokenRecord


@contextmanager
def store_of(data_dir: str | None, database: str | None) -> Iterator[Operator]:
    """The server's store, as its operator changes it: ``database`` (a URL) or the data
    directory's SQLite file."""
    with Operator.open(data_dir, database) as operator:
        yield operator


def create(
    operator: Operator, name: str, owner: str | None, admin: bool
) -> tuple[TokenRecord, str]:
    """A new token named ``name`` of user ``owner`` (see ``Operator.create_token``): its
    stored record and the secret, to show once."""
    return operator.create_token(name, owner, admin, by=_by())


def revoke(operator: Operator, token_id: str) -> None:
    operator.revoke_token(token_id, by=_by())


def _by() -> str:
    """Who changes the store here, for the audit trail: the operator's login."""
    try:
        login = getpass.getuser()
    except (OSError, KeyError):
        login = "?"
    return f"{login} with trainfleet token"


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


def rotate_secret_key(operator: Operator, data_dir: str | None) -> int:
    """A new first key in the data directory's key file, and every secret encrypted with
    it (see ``Operator.rotate_secret_key``); how many were encrypted again. ``data_dir``:
    the one ``operator`` was opened on."""
    import os

    from trainfleet.vault.keys import KEY_VARIABLE

    if os.environ.get(KEY_VARIABLE, "").strip():
        raise UserError(
            f"the keys come from {KEY_VARIABLE}: put a new key first in it (keeping the old), "
            "restart the server, and it encrypts the secrets again"
        )
    return operator.rotate_secret_key()
