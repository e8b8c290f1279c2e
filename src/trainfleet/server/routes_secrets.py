"""``/api/v1/secrets``: a team's secrets, made and deleted by name; values never answered."""

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from trainfleet.control.access import Action, Caller
from trainfleet.domain.records import Audited, SecretRecord
from trainfleet.server.audit import Audit, Change
from trainfleet.server.auth import Authenticate, Principal
from trainfleet.server.errors import ERROR_RESPONSES, ApiError, responses
from trainfleet.server.params import known_query_only
from trainfleet.store.errors import StoreConflict
from trainfleet.vault.secrets import Secrets
from trainfleet.wire import NAME_PATTERN, SecretBody, SecretView

Name = Annotated[str, Path(pattern=NAME_PATTERN)]


def router(secrets: Secrets, auth: Authenticate, audit: Audit) -> APIRouter:
    """The secret endpoints: a team's members list and make them, delete their own; its
    team-admins delete any (each change recorded by ``audit``, never a value)."""
    api = APIRouter(
        prefix="/secrets",
        tags=["secrets"],
        dependencies=[Depends(auth), Depends(known_query_only)],
        responses=ERROR_RESPONSES,
    )
    Who = Annotated[Principal, Depends(auth)]

    @api.get("")
    def list_secrets(who: Who) -> list[SecretView]:
        """The secrets of the caller's teams (every team's, for an administrator)."""
        caller = who.caller
        return [
            _view(secret)
            for secret in secrets.list(caller.teams_seen())
            if caller.decide(Action.READ_SECRETS, secret.team).allowed
        ]

    @api.post(
        "",
        status_code=201,
        responses=responses(_403="The caller's role does not allow it.", _409="The name is taken."),
    )
    def create_secret(
        body: SecretBody, who: Who, change: Annotated[Change, audit(Audited.SECRET_CREATE)]
    ) -> SecretView:
        """Store a secret of the team, encrypted; its values go only to the tasks that name
        it, and never come back in an answer."""
        change.target, change.detail = body.name, f"keys: {', '.join(sorted(body.data))}"
        team = change.team = _team(who.caller, body.team)
        who.caller.require(Action.CREATE_SECRET, team, missing=f"team: no team {team!r}")
        if secrets.store.accounts.get_team(team) is None:
            raise ApiError(422, f"team: no team {team!r}")
        try:
            return _view(secrets.create(team, body.name, body.data, who.caller.user))
        except StoreConflict as error:
            raise ApiError(409, f"name: {error}") from None

    @api.delete(
        "/{team}/{name}",
        status_code=204,
        response_class=Response,
        responses=responses(_403="The caller's role does not allow it."),
    )
    def delete_secret(
        team: Name,
        name: Name,
        who: Who,
        change: Annotated[Change, audit(Audited.SECRET_DELETE, "name")],
    ) -> None:
        """Forget a secret; jobs that name it cannot start again."""
        change.team = team
        missing = f"no secret {name!r} in team {team!r}"
        if not who.caller.sees(Action.DELETE_SECRET, team):
            raise ApiError(404, missing)
        secret = secrets.get(team, name)
        who.caller.require(Action.DELETE_SECRET, team, secret.user, missing=missing)
        secrets.delete(team, name)

    return api


def _team(caller: Caller, asked: str | None) -> str:
    team = asked or caller.only_team
    if team is not None:
        return team
    raise ApiError(422, "team: name the secret's team (you are in several teams, or none)")


def _view(secret: SecretRecord) -> SecretView:
    return SecretView(**secret.to_dict(exclude={"data"}))
