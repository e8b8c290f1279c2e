"""Users, teams, memberships and tokens: the one implementation behind the API's account
endpoints, its token checks, a server's first token and ``trainfleet token`` on the
server's machine.

Administrators make users and teams; a team's team-admins choose its members; every user
makes and revokes its own tokens. Each check is ``access.RULES``'s.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import TYPE_CHECKING

from trainfleet.control.access import Action, Caller
from trainfleet.control.services.tokens import (
    Principal,
    digest,
    new_record,
    new_token,
    principal_of,
)
from trainfleet.domain.errors import BadInput, Conflict, NotFound
from trainfleet.domain.records import (
    Audited,
    AuditRecord,
    TeamRecord,
    TeamRole,
    TokenRecord,
    UserRecord,
)
from trainfleet.spec.queues import QueueConfig
from trainfleet.store.errors import StoreConflict
from trainfleet.wire import NewToken, NewUser, TeamView, TokenView, UserBody, UserView, WhoAmI

if TYPE_CHECKING:
    from trainfleet.control.services.audit import AuditLog
    from trainfleet.control.services.queues import Queues
    from trainfleet.store.database import Store

log = logging.getLogger("trainfleet.server")

ADMIN = "admin"
"""The built-in administrator, whose token the server makes on its first start."""
LOCAL = "local"
"""The source of a change made on the server's machine, not through the API."""
FIRST_TOKEN = "first"
"""The name of the token a new user gets with its account."""
MIN_GIVEN_LENGTH = 16
"""Shortest TRAINFLEET_ADMIN_TOKEN accepted: only a long random secret is safe to hash plainly."""


class Accounts:
    """The accounts kept in ``store``; ``queues``: where a new team's queue is made (a
    server's; none for the changes made on its machine)."""

    def __init__(self, store: Store, audit: AuditLog, queues: Queues | None = None) -> None:
        self.store = store
        self.audit = audit
        self.queues = queues
        self.stored = store.accounts

    # -- tokens as credentials ------------------------------------------------

    def principal(self, token_digest: str) -> Principal | None:
        """Who holds the token with this digest, asked of the store now; None if nobody
        (unknown, revoked, or its user disabled or gone)."""
        return principal_of(self.store, token_digest)

    def still_sees(self, who: Principal, action: Action, team: str) -> bool:
        """Whether ``who``'s token still holds and its user still sees ``team``'s objects."""
        now = self.principal(who.token.digest)
        return now is not None and now.caller.sees(action, team)

    def bootstrap(self, given: str | None = None) -> str | None:
        """Make sure some token exists; returns a new one that the caller must show once.

        With no token stored yet, ``given`` (``TRAINFLEET_ADMIN_TOKEN``) becomes the admin
        token, or a random one is made and returned. With tokens stored, nothing changes.
        """
        if self.store.list_tokens():
            if given and self.store.token_by_digest(digest(given)) is None:
                log.warning("TRAINFLEET_ADMIN_TOKEN is ignored: the server already has tokens")
            return None
        if given is not None and len(given) < MIN_GIVEN_LENGTH:
            raise ValueError(
                f"TRAINFLEET_ADMIN_TOKEN is too short to be safe: use {MIN_GIVEN_LENGTH} "
                "characters or more (or leave it unset, and the server makes a random token)"
            )
        token = given or new_token()
        detail = "named first of user admin, at the server's first start"
        self._admin_token(
            FIRST_TOKEN, token, detail + (" (TRAINFLEET_ADMIN_TOKEN)" if given else "")
        )
        return None if given else token

    def page_token(self) -> tuple[str, str]:
        """A new administrator's token for one ``trainfleet ui`` (its secret and its id: the
        command revokes it when it ends)."""
        token = new_token()
        detail = "for trainfleet ui on this machine, revoked when it ends"
        return token, self._admin_token(f"ui-{secrets.token_hex(4)}", token, detail)

    def _admin_token(self, name: str, token: str, detail: str) -> str:
        """Store ``token`` of the administrator as ``name``, audited; its id."""
        record = new_record(name, token, user=ADMIN)
        self.store.add_token(record)
        self.audit.record(
            AuditRecord(
                time=record.created_at,
                action=Audited.TOKEN_CREATE,
                target=record.id,
                source=LOCAL,
                detail=detail,
            )
        )
        return record.id

    def revoke_page_token(self, token_id: str) -> None:
        """End the token of a ``trainfleet ui`` that ends (and the sessions it opened)."""
        self.store.revoke_token(token_id)

    # -- who the caller is ----------------------------------------------------

    def whoami(self, who: Principal) -> WhoAmI:
        """The caller's user, token and teams."""
        caller = who.caller
        teams = self.stored.memberships(caller.user) if caller.admin else dict(caller.teams)
        return WhoAmI(user=caller.user, admin=caller.admin, token=who.token.name, teams=teams)

    # -- users ----------------------------------------------------------------

    def users(self, caller: Caller) -> list[UserView]:
        """Every user (administrators only)."""
        caller.require(Action.MANAGE_USERS)
        return [self._user_view(user) for user in self.stored.list_users()]

    def create_user(self, caller: Caller, body: UserBody) -> tuple[NewUser, TokenRecord]:
        """Make a user (in ``body.team`` with ``body.role``, if given) and its first token:
        the user and the token's secret, to show once, and the token's record."""
        caller.require(Action.MANAGE_USERS)
        if body.team is not None and self.stored.get_team(body.team) is None:
            raise BadInput(f"team: no team {body.team!r}")
        user = UserRecord(name=body.name, admin=body.admin, created_at=time.time())
        try:
            self.stored.add_user(user)
        except StoreConflict:
            raise Conflict(f"name: a user named {body.name!r} exists already") from None
        if body.team is not None:
            self.stored.set_member(body.team, user.name, body.role)
        record, secret = self.issue(FIRST_TOKEN, user.name)
        self.store.add_token(record)
        return NewUser(user=self._user_view(user), token=secret), record

    def disable_user(self, caller: Caller, name: str) -> UserView:
        """Disable a user: its tokens stop working at once, its jobs go on."""
        caller.require(Action.MANAGE_USERS)
        self._existing_user(name)
        if name == caller.user:
            raise Conflict("you cannot disable yourself: ask another administrator")
        self.stored.disable_user(name)
        return self._user_view(self._existing_user(name))

    def _user_view(self, user: UserRecord) -> UserView:
        return UserView(**user.to_dict(), teams=self.stored.memberships(user.name))

    def _existing_user(self, name: str, field: str = "user") -> UserRecord:
        user = self.stored.get_user(name)
        if user is None:
            missing = NotFound if field == "user" else BadInput
            raise missing(f"{field}: no user {name!r}")
        return user

    # -- teams ----------------------------------------------------------------

    def teams(self, caller: Caller) -> list[TeamView]:
        """The caller's teams (every team, for an administrator)."""
        return [
            TeamView(**team.to_dict())
            for team in self.stored.list_teams()
            if caller.sees(Action.READ_TEAM, team.name)
        ]

    def create_team(self, caller: Caller, name: str) -> TeamView:
        """Make a team, with a queue of its name (no quota) as its default queue."""
        caller.require(Action.MANAGE_TEAMS)
        assert self.queues is not None, "teams are made where queues are"
        team = TeamRecord(name=name, default_queue=name, created_at=time.time())
        queue = QueueConfig(name=name)
        try:
            self.stored.add_team(team, queue.model_dump_json())
        except StoreConflict:
            raise Conflict(f"name: a team or a queue named {name!r} exists already") from None
        self.queues.configure(queue, team.name)
        return TeamView(**team.to_dict())

    def team(self, caller: Caller, name: str, action: Action = Action.READ_TEAM) -> TeamView:
        """A team with its members, if the caller may do ``action`` to it."""
        team = self.stored.get_team(name)
        if team is None:
            raise NotFound(f"no team {name!r}")
        caller.require(action, name, missing=f"no team {name!r}")
        return TeamView(**team.to_dict())

    def set_member(self, caller: Caller, team: str, user: str, role: TeamRole) -> TeamView:
        """Add a user to the team with a role, or change its role there."""
        self.team(caller, team, Action.CHANGE_MEMBERS)
        self._existing_user(user, field="user")
        self.stored.set_member(team, user, role)
        return self.team(caller, team)

    def remove_member(self, caller: Caller, team: str, user: str) -> None:
        """Take a user out of the team: it stops seeing the team's jobs at once."""
        self.team(caller, team, Action.CHANGE_MEMBERS)
        if not self.stored.remove_member(team, user):
            raise NotFound(f"user {user!r} is not in team {team!r}")

    # -- tokens ---------------------------------------------------------------

    def tokens(self, user: str | None = None) -> list[TokenRecord]:
        """Every token (of ``user``, if given), revoked ones included, oldest first."""
        return self.store.list_tokens(user=user)

    def token_views(self, caller: Caller) -> list[TokenView]:
        """The caller's tokens, revoked ones included."""
        return [token_view(token) for token in self.tokens(caller.user)]

    @staticmethod
    def issue(name: str, user: str) -> tuple[TokenRecord, str]:
        """A new token of ``user``, not stored yet: its record and its secret."""
        secret = new_token()
        return new_record(name, secret, user), secret

    def add_token(self, record: TokenRecord, secret: str) -> NewToken:
        """Store a token from ``issue``; Conflict when its user has one of that name."""
        try:
            self.store.add_token(record)
        except StoreConflict as error:
            raise Conflict(f"name: {error}") from None
        return NewToken(token=token_view(record), secret=secret)

    def token(self, token_id: str) -> TokenRecord | None:
        """The token with this id, revoked or not."""
        return self.store.get_token(token_id)

    def revoke_token(self, caller: Caller, token: TokenRecord | None, token_id: str) -> None:
        """Revoke ``token`` (the caller's own; an administrator: anyone's); NotFound where
        it is none of the caller's, Conflict where it is revoked already."""
        if token is None or not (caller.admin or token.user == caller.user):
            raise NotFound(f"no token {token_id!r}")
        if not self.store.revoke_token(token_id):
            raise Conflict(f"token {token_id} is revoked already")


def bootstrap(store: Store, given: str | None = None) -> str | None:
    """``Accounts.bootstrap`` on ``store``: a server's first token."""
    from trainfleet.control.services.audit import AuditLog

    return Accounts(store, AuditLog(store.audit)).bootstrap(given)


def token_view(token: TokenRecord) -> TokenView:
    """A token as the API shows it: never its digest."""
    return TokenView(**token.to_dict(exclude={"digest", "admin"}))
