"""``trainfleet whoami``, ``user``, ``team`` and ``secret``: they live on a server.

Each command asks the server (``--server``, ``TRAINFLEET_SERVER`` or the config file),
which checks it by the same rules as every other request; without a server there are no
users to manage (an embedded ``trainfleet run`` is its one user's).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from trainfleet.cli.commands import _dump, user_errors
from trainfleet.cli.errors import UserError
from trainfleet.cli.factory import open_remote
from trainfleet.cli.options import Options
from trainfleet.cli.tables import print_rows

if TYPE_CHECKING:
    from trainfleet.cli.remote import RemoteService
    from trainfleet.wire import TeamView, UserView


@contextmanager
def server_of(options: Options, what: str = "users and teams live") -> Iterator[RemoteService]:
    """The configured server (``open_remote``), closed afterwards; its errors become messages."""
    with user_errors(), closing(open_remote(options, what)) as service:
        yield service


def whoami(options: Options, output: str) -> int:
    with server_of(options) as server:
        me = server.call(server.client.whoami)
    if output != "table":
        _dump(me.model_dump(mode="json"), output)
        return 0
    roles = ", ".join(f"{role.value} of {team}" for team, role in sorted(me.teams.items()))
    kind = "an administrator" if me.admin else (roles or "in no team")
    click.echo(f"{me.user} ({kind}), token {me.token!r}")
    return 0


def user_create(options: Options, name: str, admin: bool, team: str | None, role: str) -> int:
    from trainfleet.domain.records import TeamRole
    from trainfleet.wire import UserBody

    # The server validates it, naming the field: one place says what a name may be.
    body = UserBody.model_construct(name=name, admin=admin, team=team, role=TeamRole(role))
    with server_of(options) as server:
        made = server.call(lambda: server.client.create_user(body))
    click.echo(f"user {name} made; its token (shown only this once):", err=True)
    click.echo(made.token)
    return 0


def user_list(options: Options, output: str) -> int:
    with server_of(options) as server:
        users = server.call(server.client.users)
    _show_users(users, output)
    return 0


def user_disable(options: Options, name: str) -> int:
    with server_of(options) as server:
        server.call(lambda: server.client.disable_user(name))
    click.echo(f"user {name} disabled: its tokens no longer work")
    return 0


def team_create(options: Options, name: str, output: str) -> int:
    with server_of(options) as server:
        team = server.call(lambda: server.client.create_team(name))
    _show_teams([team], output)
    return 0


def team_list(options: Options, output: str) -> int:
    with server_of(options) as server:
        teams = server.call(server.client.teams)
    _show_teams(teams, output)
    return 0


def team_add(options: Options, team: str, user: str, role: str, output: str) -> int:
    with server_of(options) as server:
        changed = server.call(lambda: server.client.set_member(team, user, role))
    _show_teams([changed], output)
    return 0


def team_remove(options: Options, team: str, user: str) -> int:
    with server_of(options) as server:
        server.call(lambda: server.client.remove_member(team, user))
    click.echo(f"user {user} removed from team {team}")
    return 0


def _show_users(users: Sequence[UserView], output: str) -> None:
    if output != "table":
        _dump([user.model_dump(mode="json") for user in users], output)
        return
    rows = [("NAME", "ADMIN", "TEAMS", "DISABLED")] + [
        (
            user.name,
            "yes" if user.admin else "no",
            ", ".join(f"{team} ({role.value})" for team, role in sorted(user.teams.items())) or "-",
            "yes" if user.disabled_at is not None else "no",
        )
        for user in users
    ]
    print_rows(rows)


def _show_teams(teams: Sequence[TeamView], output: str) -> None:
    if output != "table":
        _dump([team.model_dump(mode="json") for team in teams], output)
        return
    rows = [("TEAM", "DEFAULT QUEUE", "MEMBERS")] + [
        (
            team.name,
            team.default_queue,
            ", ".join(f"{user} ({role.value})" for user, role in team.members.items()) or "-",
        )
        for team in teams
    ]
    print_rows(rows)


def secret_create(
    options: Options,
    name: str,
    literals: Sequence[str],
    files: Sequence[str],
    team: str | None,
) -> int:
    with server_of(options, "secrets live") as server:
        values = _values(literals, "--from-literal", lambda text: text)
        values.update(_values(files, "--from-file", _read_text))
        if not values:
            raise UserError("give the values: --from-literal KEY=VALUE or --from-file KEY=PATH")
        made = server.call(lambda: server.client.create_secret(name, values, team))
    click.echo(f"secret {made.name} of team {made.team} made, keys: {', '.join(made.keys)}")
    return 0


def secret_list(options: Options, output: str) -> int:
    with server_of(options, "secrets live") as server:
        secrets = server.call(server.client.secrets)
    if output != "table":
        _dump([secret.model_dump(mode="json") for secret in secrets], output)
        return 0
    rows = [("TEAM", "NAME", "KEYS", "BY")] + [
        (secret.team, secret.name, ", ".join(secret.keys), secret.user) for secret in secrets
    ]
    print_rows(rows)
    return 0


def secret_delete(options: Options, name: str, team: str | None) -> int:
    with server_of(options, "secrets live") as server:
        if team is None:
            teams = [s.team for s in server.call(server.client.secrets) if s.name == name]
            if len(teams) != 1:
                known = f"in teams {', '.join(teams)}: give --team" if teams else "to delete"
                raise UserError(f"no single secret {name!r} {known} (see trainfleet secret list)")
            (team,) = teams
        server.call(lambda: server.client.delete_secret(team, name))
    click.echo(f"secret {name} of team {team} deleted")
    return 0


def _values(pairs: Sequence[str], flag: str, read: Callable[[str], str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UserError(f"{flag} {pair.partition('=')[0]!r}: expected KEY=VALUE")
        if key in values:
            raise UserError(f"{flag}: the key {key!r} is given twice")
        values[key] = read(value)
    return values


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--from-file: {path} is not UTF-8 text") from None
    except OSError as error:
        raise UserError(f"--from-file: cannot read {path}: {error.strerror or error}") from None
