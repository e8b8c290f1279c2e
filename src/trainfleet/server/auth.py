"""Bearer tokens: making them, storing only their digest, and checking every request.

A token is 32 random bytes (``secrets.token_urlsafe``). The store keeps only its SHA-256:
for a secret of that entropy a plain hash cannot be reversed or guessed, so the slow,
salted hashes that passwords need (bcrypt, scrypt) would add cost and no safety.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from cachetools import TTLCache
from fastapi import Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import Scope

from trainfleet.control.access import Caller
from trainfleet.domain.errors import Unauthorized
from trainfleet.domain.records import Audited, AuditRecord, TokenRecord
from trainfleet.server.errors import ApiError
from trainfleet.store.database import Store

log = logging.getLogger("trainfleet.server")

ADMIN = "admin"
"""The built-in administrator, whose token the server makes on its first start."""
LOCAL = "local"
"""The source of a change made on the server's machine, not through the API."""

MIN_GIVEN_LENGTH = 16
"""Shortest TRAINFLEET_ADMIN_TOKEN accepted: only a long random secret is safe to hash plainly."""

bearer = HTTPBearer(
    auto_error=False,
    description="A token from the server's first start, or from `trainfleet token create`.",
)


def new_token() -> str:
    """A fresh random token: 43 URL-safe characters."""
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """What the store keeps of a token (see the module docstring for why SHA-256 suffices)."""
    return hashlib.sha256(token.encode()).hexdigest()


def bootstrap(store: Store, given: str | None = None) -> str | None:
    """Make sure some token exists; returns a new one that the caller must show once.

    With no token stored yet, ``given`` (``TRAINFLEET_ADMIN_TOKEN``) becomes the admin
    token, or a random one is made and returned. With tokens stored, nothing changes.
    """
    if store.list_tokens():
        if given and store.token_by_digest(digest(given)) is None:
            log.warning("TRAINFLEET_ADMIN_TOKEN is ignored: the server already has tokens")
        return None
    if given is not None and len(given) < MIN_GIVEN_LENGTH:
        raise ValueError(
            f"TRAINFLEET_ADMIN_TOKEN is too short to be safe: use {MIN_GIVEN_LENGTH} characters "
            "or more (or leave it unset, and the server makes a random token)"
        )
    token = given or new_token()
    record = new_record("first", token, user=ADMIN)
    store.add_token(record)
    detail = "named first of user admin, at the server's first start"
    store.audit.record(
        AuditRecord(
            time=record.created_at,
            action=Audited.TOKEN_CREATE,
            target=record.id,
            source=LOCAL,
            detail=detail + (" (TRAINFLEET_ADMIN_TOKEN)" if given else ""),
        )
    )
    return None if given else token


def new_record(name: str, token: str, user: str) -> TokenRecord:
    """The record of ``user``'s new token, to store: its id is public, its digest is all
    that is kept."""
    return TokenRecord(
        id=secrets.token_hex(4),
        name=name,
        digest=digest(token),
        user=user,
        created_at=time.time(),
    )


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: the token it carries and the user that token is for."""

    token: TokenRecord
    caller: Caller


class TokenRefused(ApiError, Unauthorized):
    """401: no token, or one that is unknown or revoked (or its user disabled); ``reason``
    says which in a few words, for the audit trail."""

    def __init__(self, reason: str, detail: str = "", error: str = "") -> None:
        super().__init__(401, detail or reason, _challenge(error))
        self.reason = reason


TOKEN_CACHE_SECONDS = 2.0
"""How long a looked-up token is trusted without asking the store again: a token revoked
(by ``trainfleet token revoke``, possibly in another process) stops working this soon."""


class Tokens:
    """Checks bearer tokens against the store, caching lookups briefly.

    The store is shared with the jobs' threads, and a query per request would make every
    request wait for it.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.known: TTLCache[str, Principal | None] = TTLCache(
            maxsize=10_000, ttl=TOKEN_CACHE_SECONDS
        )

    def check(self, credentials: str | None) -> Principal:
        """Who holds the valid, unrevoked token ``credentials`` (its user enabled);
        TokenRefused (401) if nobody."""
        if credentials is None:
            raise TokenRefused(
                "no token", "this server needs a token: Authorization: Bearer <token>"
            )
        key = digest(credentials)
        if key in self.known:
            principal = self.known[key]
        else:
            principal = self.known[key] = principal_of(self.store, key)
        if principal is None:
            raise TokenRefused(
                "unknown token",
                "the token is unknown or revoked, or its user is disabled",
                "invalid_token",
            )
        return principal

    def check_header(self, authorization: str | None) -> Principal:
        """As ``check``, from an ``Authorization`` header as HTTPBearer reads it."""
        scheme, _, credentials = (authorization or "").partition(" ")
        given = credentials.strip() if scheme.lower() == "bearer" else ""
        return self.check(given or None)


def principal_of(store: Store, key: str) -> Principal | None:
    """The holder of the token with digest ``key``; None if it is revoked or unknown, or
    its user disabled or gone."""
    token = store.token_by_digest(key)
    if token is None or token.revoked:
        return None
    user = store.accounts.get_user(token.user)
    if user is None or user.disabled:
        return None
    teams = {} if user.admin else store.accounts.memberships(user.name)
    return Principal(token, Caller(user.name, admin=user.admin, teams=teams))


Authenticate = Callable[..., Awaitable[Principal]]
"""The dependency every endpoint but the health checks has: who calls, or 401."""
OnRefusal = Callable[[Scope, TokenRefused], Awaitable[None]]
"""What to do of a request refused for its token (record it), before it is answered."""


def authenticator(
    store: Store, tokens: Tokens | None = None, refused: OnRefusal | None = None
) -> Authenticate:
    """The dependency that answers 401 unless the request has a valid, unrevoked token."""
    checker = tokens or Tokens(store)

    async def authenticate(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> Principal:
        try:
            return checker.check(None if credentials is None else credentials.credentials)
        except TokenRefused as error:
            if refused is not None:
                await refused(request.scope, error)
            raise

    return authenticate


def _challenge(error: str = "") -> dict[str, str]:
    value = 'Bearer realm="trainfleet"' + (f', error="{error}"' if error else "")
    return {"WWW-Authenticate": value}
