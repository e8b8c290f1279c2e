"""``trainfleet token``: the server's API tokens, made where the server's data is."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import OUTPUT, Options


@click.group()
@click.option(
    "--database-url",
    envvar="TRAINFLEET_DATABASE_URL",
    help="The server's database, when it is not SQLite in the data directory [default: "
    "TRAINFLEET_DATABASE_URL]. Given here, its password shows in `ps`.",
)
@click.option(
    "--database-url-file",
    type=click.Path(dir_okay=False),
    help="A file whose first line is the server's database URL.",
)
@click.pass_context
def token(ctx: click.Context, database_url: str | None, database_url_file: str | None) -> None:
    """Make, list and revoke the server's API tokens (run where the server's data is)."""
    from trainfleet.control.settings import database_url_of

    try:
        database_url = database_url_of(database_url, database_url_file)
    except ValueError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    ctx.obj = (ctx.find_object(Options) or Options(), database_url)


@token.command(name="create")
@click.argument("name")
@click.option(
    "--user",
    "owner",
    help="The token's user (default: the user NAME, made if missing, in team 'default').",
)
@click.option("--admin", is_flag=True, help="The user NAME, if made now, is an administrator.")
@click.pass_obj
def token_create(
    where: tuple[Options, str | None], name: str, owner: str | None, admin: bool
) -> None:
    """Make a token named NAME and print it, this once only."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(where[0].data_dir, where[1]) as store:
        record, secret = tokens.create(store, name, owner, admin)
    click.echo(f"token {record.id} {name} of user {record.user} (shown only this once):", err=True)
    click.echo(secret)


@token.command(name="list")
@OUTPUT
@click.pass_obj
def token_list(where: tuple[Options, str | None], output: str) -> None:
    """List every token, revoked ones too (never the secrets)."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(where[0].data_dir, where[1]) as store:
        tokens.show(store.list_tokens(), output)


@token.command(name="revoke")
@click.argument("token_id")
@click.pass_obj
def token_revoke(where: tuple[Options, str | None], token_id: str) -> None:
    """Revoke the token with id TOKEN_ID: the server refuses it from now on."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(where[0].data_dir, where[1]) as store:
        tokens.revoke(store, token_id)
    click.echo(f"token {token_id} revoked")
