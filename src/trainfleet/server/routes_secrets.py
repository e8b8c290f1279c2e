"""``/api/v1/secrets``: a team's secrets, made and deleted by name; values never answered."""

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from trainfleet.domain.records import Audited
from trainfleet.server.audit import Change, audit
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import ERROR_RESPONSES, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import SecretsDep
from trainfleet.wire import NAME_PATTERN, SecretBody, SecretView

Name = Annotated[str, Path(pattern=NAME_PATTERN)]

router = APIRouter(
    prefix="/secrets",
    tags=["secrets"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""The secret endpoints: a team's members list and make them, delete their own; its
team-admins delete any (each change audited, never a value)."""


@router.get("")
def list_secrets(who: Who, secrets: SecretsDep) -> list[SecretView]:
    """The secrets of the caller's teams (every team's, for an administrator)."""
    return secrets.visible(who.caller)


@router.post(
    "",
    status_code=201,
    responses=responses(_403="The caller's role does not allow it.", _409="The name is taken."),
)
def create_secret(
    body: SecretBody,
    who: Who,
    change: Annotated[Change, audit(Audited.SECRET_CREATE)],
    secrets: SecretsDep,
) -> SecretView:
    """Store a secret of the team, encrypted; its values go only to the tasks that name
    it, and never come back in an answer."""
    change.target, change.detail = body.name, f"keys: {', '.join(sorted(body.data))}"
    team = change.team = secrets.team_for(who.caller, body.team)
    return secrets.create(who.caller, team, body.name, body.data)


@router.delete(
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
    secrets: SecretsDep,
) -> None:
    """Forget a secret; jobs that name it cannot start again."""
    change.team = team
    secrets.delete(who.caller, team, name)
