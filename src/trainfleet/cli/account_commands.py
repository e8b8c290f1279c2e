"""``trainfleet whoami``, ``audit``, ``user`` and ``team``: a server's accounts and trail."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import OUTPUT, Options

ROLE = click.option(
    "--role",
    type=click.Choice(["viewer", "member", "team-admin"]),
    default="member",
    show_default=True,
    help="viewer: reads the team's jobs; member: also submits, stops its own; "
    "team-admin: also the team's members, queues and everyone's jobs.",
)


@click.command()
@OUTPUT
@click.pass_obj
def whoami(options: Options, output: str) -> None:
    """Show the server's user of your token, and its teams and roles."""
    from trainfleet.cli import accounts

    sys.exit(accounts.whoami(options, output))


@click.command()
@click.option("--user", help="Only this user's records.")
@click.option("--since", metavar="WHEN", help="Only records since: 30m, 1h, 2d, or an ISO time.")
@click.option("--action", help="Only this action, or those under it: job, job.stop, token, ...")
@click.option("--team", help="Only this team's records.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@OUTPUT
@click.pass_obj
def audit(
    options: Options,
    user: str | None,
    since: str | None,
    action: str | None,
    team: str | None,
    limit: int,
    output: str,
) -> None:
    """Show the server's audit trail, newest first: who changed what, when, from where, and
    how it ended (administrators: every record; team-admins: their teams')."""
    from trainfleet.cli import audit as trail

    sys.exit(trail.audit(options, user, since, action, team, limit, output))


@click.group()
def user() -> None:
    """Make, list and disable the server's users (administrators)."""


@user.command(name="create")
@click.argument("name")
@click.option("--admin", is_flag=True, help="An administrator: may do everything.")
@click.option("--team", help="A team to put the user in.")
@ROLE
@click.pass_obj
def user_create(options: Options, name: str, admin: bool, team: str | None, role: str) -> None:
    """Make user NAME and print its first token, this once only."""
    from trainfleet.cli import accounts

    sys.exit(accounts.user_create(options, name, admin, team, role))


@user.command(name="list")
@OUTPUT
@click.pass_obj
def user_list(options: Options, output: str) -> None:
    """List every user with its teams."""
    from trainfleet.cli import accounts

    sys.exit(accounts.user_list(options, output))


@user.command(name="disable")
@click.argument("name")
@click.pass_obj
def user_disable(options: Options, name: str) -> None:
    """Disable user NAME: its tokens stop working at once; its jobs go on."""
    from trainfleet.cli import accounts

    sys.exit(accounts.user_disable(options, name))


@click.group()
def team() -> None:
    """Make teams and choose their members (a team owns its queues and jobs)."""


@team.command(name="create")
@click.argument("name")
@OUTPUT
@click.pass_obj
def team_create(options: Options, name: str, output: str) -> None:
    """Make team NAME, with a queue of the same name as its default (administrators)."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_create(options, name, output))


@team.command(name="list")
@OUTPUT
@click.pass_obj
def team_list(options: Options, output: str) -> None:
    """List your teams (every team, for an administrator) with their members."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_list(options, output))


@team.command(name="add")
@click.argument("team_name", metavar="TEAM")
@click.argument("user_name", metavar="USER")
@ROLE
@OUTPUT
@click.pass_obj
def team_add(options: Options, team_name: str, user_name: str, role: str, output: str) -> None:
    """Put USER in TEAM with a role, or change its role there (team-admins)."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_add(options, team_name, user_name, role, output))


@team.command(name="remove")
@click.argument("team_name", metavar="TEAM")
@click.argument("user_name", metavar="USER")
@click.pass_obj
def team_remove(options: Options, team_name: str, user_name: str) -> None:
    """Take USER out of TEAM (team-admins): it no longer sees the team's jobs."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_remove(options, team_name, user_name))
