"""``/api/v1/whoami``, ``/users``, ``/teams`` and ``/tokens``: who may use the server.

Administrators make users and teams; a team's team-admins choose its members; every user
makes and revokes its own tokens. Each check is ``access.RULES``'s.
"""

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from trainfleet.domain.records import Audited
from trainfleet.server.audit import Change, audit
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import ERROR_RESPONSES, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import AccountsDep
from trainfleet.wire import (
    NAME_PATTERN,
    MemberBody,
    NewToken,
    NewUser,
    TeamBody,
    TeamView,
    TokenBody,
    TokenView,
    UserBody,
    UserView,
    WhoAmI,
)

UserName = Annotated[str, Path(pattern=NAME_PATTERN, description="The user's name.")]
TeamName = Annotated[str, Path(pattern=NAME_PATTERN, description="The team's name.")]
TokenId = Annotated[str, Path(pattern=r"^[0-9a-f]{8}$", description="The token's id.")]

router = APIRouter(
    tags=["accounts"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=responses(_403="The caller's role does not allow it."),
)
"""The account endpoints, each behind a token; each change audited."""


@router.get("/whoami", responses=ERROR_RESPONSES)
def whoami(who: Who, accounts: AccountsDep) -> WhoAmI:
    """The caller's user, token and teams."""
    return accounts.whoami(who)


@router.get("/users", responses=ERROR_RESPONSES)
def list_users(who: Who, accounts: AccountsDep) -> list[UserView]:
    """Every user (administrators only)."""
    return accounts.users(who.caller)


@router.post(
    "/users",
    status_code=201,
    responses=responses(_403="Administrators only.", _409="The name is taken."),
)
def create_user(
    body: UserBody,
    who: Who,
    change: Annotated[Change, audit(Audited.USER_CREATE)],
    accounts: AccountsDep,
) -> NewUser:
    """Make a user (in ``team`` with ``role``, if given) and its first token, shown once."""
    change.target, change.team = body.name, body.team or ""
    change.detail = "an administrator" if body.admin else ""
    if body.team is not None:
        change.detail = f"{body.role.value} of team {body.team}"
    made, token = accounts.create_user(who.caller, body)
    change.detail = ", ".join(filter(None, (change.detail, f"first token {token.id}")))
    return made


@router.post(
    "/users/{name}/disable",
    responses=responses(_403="Administrators only.", _409="Disabling oneself."),
)
def disable_user(
    name: UserName,
    who: Who,
    change: Annotated[Change, audit(Audited.USER_DISABLE, "name")],
    accounts: AccountsDep,
) -> UserView:
    """Disable a user: its tokens stop working at once, its jobs go on."""
    return accounts.disable_user(who.caller, name)


@router.get("/teams", responses=ERROR_RESPONSES)
def list_teams(who: Who, accounts: AccountsDep) -> list[TeamView]:
    """The caller's teams (every team, for an administrator)."""
    return accounts.teams(who.caller)


@router.post(
    "/teams",
    status_code=201,
    responses=responses(_403="Administrators only.", _409="The name is taken."),
)
def create_team(
    body: TeamBody,
    who: Who,
    change: Annotated[Change, audit(Audited.TEAM_CREATE)],
    accounts: AccountsDep,
) -> TeamView:
    """Make a team, with a queue of its name (no quota) as its default queue."""
    change.target = change.team = body.name
    return accounts.create_team(who.caller, body.name)


@router.get("/teams/{name}", responses=ERROR_RESPONSES)
def describe_team(name: TeamName, who: Who, accounts: AccountsDep) -> TeamView:
    """A team with its members."""
    return accounts.team(who.caller, name)


@router.put("/teams/{name}/members/{user}", responses=ERROR_RESPONSES)
def put_member(
    name: TeamName,
    user: UserName,
    body: MemberBody,
    who: Who,
    change: Annotated[Change, audit(Audited.MEMBER_SET, "user")],
    accounts: AccountsDep,
) -> TeamView:
    """Add a user to the team with a role, or change its role there."""
    change.team, change.detail = name, body.role.value
    return accounts.set_member(who.caller, name, user, body.role)


@router.delete("/teams/{name}/members/{user}", status_code=204, response_class=Response)
def remove_member(
    name: TeamName,
    user: UserName,
    who: Who,
    change: Annotated[Change, audit(Audited.MEMBER_REMOVE, "user")],
    accounts: AccountsDep,
) -> None:
    """Take a user out of the team: it stops seeing the team's jobs at once."""
    change.team = name
    accounts.remove_member(who.caller, name, user)


@router.get("/tokens", responses=ERROR_RESPONSES)
def list_tokens(who: Who, accounts: AccountsDep) -> list[TokenView]:
    """The caller's tokens, revoked ones included."""
    return accounts.token_views(who.caller)


@router.post("/tokens", status_code=201, responses=responses(_409="The name is taken."))
def create_token(
    body: TokenBody,
    who: Who,
    change: Annotated[Change, audit(Audited.TOKEN_CREATE)],
    accounts: AccountsDep,
) -> NewToken:
    """Make a token for the caller's own user; its secret is shown once."""
    record, secret = accounts.issue(body.name, who.caller.user)
    change.target, change.detail = record.id, f"named {body.name}"
    return accounts.add_token(record, secret)


@router.delete("/tokens/{token_id}", status_code=204, response_class=Response)
def revoke_token(
    token_id: TokenId,
    who: Who,
    change: Annotated[Change, audit(Audited.TOKEN_REVOKE, "token_id")],
    accounts: AccountsDep,
) -> None:
    """Revoke one of the caller's tokens (an administrator: anyone's)."""
    token = accounts.token(token_id)
    change.detail = f"of user {token.user}" if token is not None else ""
    accounts.revoke_token(who.caller, token, token_id)
