"""A team's secrets, made and deleted by name; their values never come back out.

A team's members list and make them, delete their own; its team-admins delete any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainfleet.control.access import Action, Caller
from trainfleet.domain.errors import BadInput, Conflict, NotFound
from trainfleet.domain.records import SecretRecord
from trainfleet.store.errors import StoreConflict
from trainfleet.wire import SecretView

if TYPE_CHECKING:
    from collections.abc import Mapping

    from trainfleet.store.accounts import Accounts as StoredAccounts
    from trainfleet.vault.secrets import Secrets


class TeamSecrets:
    """The secrets ``vault`` keeps, of the teams in ``accounts``."""

    def __init__(self, vault: Secrets, accounts: StoredAccounts) -> None:
        self.vault = vault
        self.accounts = accounts

    def visible(self, caller: Caller) -> list[SecretView]:
        """The secrets of the caller's teams (every team's, for an administrator)."""
        return [
            view(secret)
            for secret in self.vault.list(caller.teams_seen())
            if caller.decide(Action.READ_SECRETS, secret.team).allowed
        ]

    @staticmethod
    def team_for(caller: Caller, asked: str | None) -> str:
        """The team a new secret goes to: ``asked``, else the caller's only team."""
        team = asked or caller.only_team
        if team is not None:
            return team
        raise BadInput("team: name the secret's team (you are in several teams, or none)")

    def create(self, caller: Caller, team: str, name: str, data: Mapping[str, str]) -> SecretView:
        """Store a secret of ``team``, encrypted, if the caller may."""
        caller.require(Action.CREATE_SECRET, team, missing=f"team: no team {team!r}")
        if self.accounts.get_team(team) is None:
            raise BadInput(f"team: no team {team!r}")
        try:
            return view(self.vault.create(team, name, data, caller.user))
        except StoreConflict as error:
            raise Conflict(f"name: {error}") from None

    def delete(self, caller: Caller, team: str, name: str) -> None:
        """Forget a secret, if the caller may; jobs that name it cannot start again."""
        missing = f"no secret {name!r} in team {team!r}"
        if not caller.sees(Action.DELETE_SECRET, team):
            raise NotFound(missing)
        secret = self.vault.get(team, name)
        caller.require(Action.DELETE_SECRET, team, secret.user, missing=missing)
        self.vault.delete(team, name)


def view(secret: SecretRecord) -> SecretView:
    """A secret as the API shows it: never its values."""
    return SecretView(**secret.to_dict(exclude={"data"}))
