"""``/api/v1/whoami``, ``/users``, ``/teams`` and ``/tokens``: who may use the server.

Administrators make users and teams; a team's team-admins choose its members; every user
makes and revokes its own tokens. Each check is ``access.RULES``'s.
"""

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from trainfleet.control.access import Action, Caller
from trainfleet.control.engine import Engine
from trainfleet.domain.records import Audited, TeamRecord, TokenRecord, UserRecord
from trainfleet.server.audit import Audit, Change
from trainfleet.server.auth import Authenticate, Principal, new_record, new_token
from trainfleet.server.errors import ERROR_RESPONSES, ApiError, responses
from trainfleet.server.ownership import QueueTeams
from trainfleet.server.params import known_query_only
from trainfleet.spec.queues import QueueConfig
from trainfleet.store.errors import StoreConflict
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
FIRST_TOKEN = "first"
"""The name of the token a new user gets with its account."""


def router(engine: Engine, auth: Authenticate, audit: Audit, queue_teams: QueueTeams) -> APIRouter:
    """The account endpoints, each behind ``auth``; each change recorded by ``audit``."""
    accounts = engine.store.accounts
    api = APIRouter(
        tags=["accounts"],
        dependencies=[Depends(auth), Depends(known_query_only)],
        responses=responses(_403="The caller's role does not allow it."),
    )
    Who = Annotated[Principal, Depends(auth)]

    def user_view(user: UserRecord) -> UserView:
        return UserView(**user.to_dict(), teams=accounts.memberships(user.name))

    def existing_user(name: str, field: str = "user") -> UserRecord:
        user = accounts.get_user(name)
        if user is None:
            raise ApiError(404 if field == "user" else 422, f"{field}: no user {name!r}")
        return user

    def visible_team(caller: Caller, name: str, action: Action) -> TeamRecord:
        team = accounts.get_team(name)
        if team is None:
            raise ApiError(404, f"no team {name!r}")
        caller.require(action, name, missing=f"no team {name!r}")
        return team

    @api.get("/whoami", responses=ERROR_RESPONSES)
    def whoami(who: Who) -> WhoAmI:
        """The caller's user, token and teams."""
        caller = who.caller
        teams = accounts.memberships(caller.user) if caller.admin else dict(caller.teams)
        return WhoAmI(user=caller.user, admin=caller.admin, token=who.token.name, teams=teams)

    @api.get("/users", responses=ERROR_RESPONSES)
    def list_users(who: Who) -> list[UserView]:
        """Every user (administrators only)."""
        who.caller.require(Action.MANAGE_USERS)
        return [user_view(user) for user in accounts.list_users()]

    @api.post(
        "/users",
        status_code=201,
        responses=responses(_403="Administrators only.", _409="The name is taken."),
    )
    def create_user(
        body: UserBody, who: Who, change: Annotated[Change, audit(Audited.USER_CREATE)]
    ) -> NewUser:
        """Make a user (in ``team`` with ``role``, if given) and its first token, shown once."""
        change.target, change.team = body.name, body.team or ""
        change.detail = "an administrator" if body.admin else ""
        if body.team is not None:
            change.detail = f"{body.role.value} of team {body.team}"
        who.caller.require(Action.MANAGE_USERS)
        if body.team is not None and accounts.get_team(body.team) is None:
            raise ApiError(422, f"team: no team {body.team!r}")
        user = UserRecord(name=body.name, admin=body.admin, created_at=time.time())
        try:
            accounts.add_user(user)
        except StoreConflict:
            raise ApiError(409, f"name: a user named {body.name!r} exists already") from None
        if body.team is not None:
            accounts.set_member(body.team, user.name, body.role)
        secret = new_token()
        record = new_record(FIRST_TOKEN, secret, user.name)
        engine.store.add_token(record)
        change.detail = ", ".join(filter(None, (change.detail, f"first token {record.id}")))
        return NewUser(user=user_view(user), token=secret)

    @api.post(
        "/users/{name}/disable",
        responses=responses(_403="Administrators only.", _409="Disabling oneself."),
    )
    def disable_user(
        name: UserName, who: Who, change: Annotated[Change, audit(Audited.USER_DISABLE, "name")]
    ) -> UserView:
        """Disable a user: its tokens stop working at once, its jobs go on."""
        who.caller.require(Action.MANAGE_USERS)
        existing_user(name)
        if name == who.caller.user:
            raise ApiError(409, "you cannot disable yourself: ask another administrator")
        accounts.disable_user(name)
        return user_view(existing_user(name))

    @api.get("/teams", responses=ERROR_RESPONSES)
    def list_teams(who: Who) -> list[TeamView]:
        """The caller's teams (every team, for an administrator)."""
        return [
            TeamView(**team.to_dict())
            for team in accounts.list_teams()
            if who.caller.sees(Action.READ_TEAM, team.name)
        ]

    @api.post(
        "/teams",
        status_code=201,
        responses=responses(_403="Administrators only.", _409="The name is taken."),
    )
    def create_team(
        body: TeamBody, who: Who, change: Annotated[Change, audit(Audited.TEAM_CREATE)]
    ) -> TeamView:
        """Make a team, with a queue of its name (no quota) as its default queue."""
        change.target = change.team = body.name
        who.caller.require(Action.MANAGE_TEAMS)
        team = TeamRecord(name=body.name, default_queue=body.name, created_at=time.time())
        queue = QueueConfig(name=body.name)
        try:
            accounts.add_team(team, queue.model_dump_json())
        except StoreConflict:
            raise ApiError(
                409, f"name: a team or a queue named {body.name!r} exists already"
            ) from None
        engine.set_queue(queue, team.name)
        queue_teams.forget()
        return TeamView(**team.to_dict())

    @api.get("/teams/{name}", responses=ERROR_RESPONSES)
    def describe_team(name: TeamName, who: Who) -> TeamView:
        """A team with its members."""
        return TeamView(**visible_team(who.caller, name, Action.READ_TEAM).to_dict())

    @api.put("/teams/{name}/members/{user}", responses=ERROR_RESPONSES)
    def put_member(
        name: TeamName,
        user: UserName,
        body: MemberBody,
        who: Who,
        change: Annotated[Change, audit(Audited.MEMBER_SET, "user")],
    ) -> TeamView:
        """Add a user to the team with a role, or change its role there."""
        change.team, change.detail = name, body.role.value
        visible_team(who.caller, name, Action.CHANGE_MEMBERS)
        existing_user(user, field="user")
        accounts.set_member(name, user, body.role)
        return describe_team(name, who)

    @api.delete("/teams/{name}/members/{user}", status_code=204, response_class=Response)
    def remove_member(
        name: TeamName,
        user: UserName,
        who: Who,
        change: Annotated[Change, audit(Audited.MEMBER_REMOVE, "user")],
    ) -> None:
        """Take a user out of the team: it stops seeing the team's jobs at once."""
        change.team = name
        visible_team(who.caller, name, Action.CHANGE_MEMBERS)
        if not accounts.remove_member(name, user):
            raise ApiError(404, f"user {user!r} is not in team {name!r}")

    @api.get("/tokens", responses=ERROR_RESPONSES)
    def list_tokens(who: Who) -> list[TokenView]:
        """The caller's tokens, revoked ones included."""
        return [_token_view(t) for t in engine.store.list_tokens(user=who.caller.user)]

    @api.post("/tokens", status_code=201, responses=responses(_409="The name is taken."))
    def create_token(
        body: TokenBody, who: Who, change: Annotated[Change, audit(Audited.TOKEN_CREATE)]
    ) -> NewToken:
        """Make a token for the caller's own user; its secret is shown once."""
        secret = new_token()
        record = new_record(body.name, secret, who.caller.user)
        change.target, change.detail = record.id, f"named {body.name}"
        try:
            engine.store.add_token(record)
        except StoreConflict as error:
            raise ApiError(409, f"name: {error}") from None
        return NewToken(token=_token_view(record), secret=secret)

    @api.delete("/tokens/{token_id}", status_code=204, response_class=Response)
    def revoke_token(
        token_id: TokenId,
        who: Who,
        change: Annotated[Change, audit(Audited.TOKEN_REVOKE, "token_id")],
    ) -> None:
        """Revoke one of the caller's tokens (an administrator: anyone's)."""
        token = engine.store.get_token(token_id)
        owner = token.user if token is not None else None
        change.detail = f"of user {owner}" if owner is not None else ""
        if owner is None or not (who.caller.admin or owner == who.caller.user):
            raise ApiError(404, f"no token {token_id!r}")
        if not engine.store.revoke_token(token_id):
            raise ApiError(409, f"token {token_id} is revoked already")

    return api


def _token_view(token: TokenRecord) -> TokenView:
    return TokenView(**token.to_dict(exclude={"digest", "admin"}))
