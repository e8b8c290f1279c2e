"""``trainfleet secret``: a team's secrets on the server, and the key that encrypts them."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import OUTPUT, Options


@click.group()
def secret() -> None:
    """Keep a team's secrets on the server; jobs name them in env: {secret: S, key: K}."""


@secret.command(name="create")
@click.argument("name")
@click.option("--from-literal", "literals", multiple=True, metavar="KEY=VALUE", help="A value.")
@click.option(
    "--from-file", "files", multiple=True, metavar="KEY=PATH", help="A value from a text file."
)
@click.option("--team", help="The secret's team (default: your only team).")
@click.pass_obj
def secret_create(
    options: Options,
    name: str,
    literals: tuple[str, ...],
    files: tuple[str, ...],
    team: str | None,
) -> None:
    """Store secret NAME, encrypted; its values never come back from the server."""
    from trainfleet.cli import accounts

    sys.exit(accounts.secret_create(options, name, literals, files, team))


@secret.command(name="list")
@OUTPUT
@click.pass_obj
def secret_list(options: Options, output: str) -> None:
    """List your teams' secrets and their keys (never their values)."""
    from trainfleet.cli import accounts

    sys.exit(accounts.secret_list(options, output))


@secret.command(name="delete")
@click.argument("name")
@click.option("--team", help="The secret's team (needed where several have one so named).")
@click.pass_obj
def secret_delete(options: Options, name: str, team: str | None) -> None:
    """Delete secret NAME: jobs naming it cannot start again."""
    from trainfleet.cli import accounts

    sys.exit(accounts.secret_delete(options, name, team))


@secret.command(name="rotate-key")
@click.option("--database-url", help="The server's database (default: its --data-dir's).")
@click.pass_obj
def secret_rotate_key(options: Options, database_url: str | None) -> None:
    """Put a new key first in the server's key file and encrypt every secret with it (run
    where the server's data is; the running server takes the new key up by itself)."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(options.data_dir, database_url) as store:
        rotated = tokens.rotate_secret_key(store, options.data_dir)
    click.echo(f"a new key encrypts the secrets now ({rotated} encrypted again); back it up")
