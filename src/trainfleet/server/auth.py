"""Checking every request's credentials, a bearer token or a dashboard session
(``sessions``): whose they are (``control.services.accounts``), cached briefly, and the
``Who`` dependency of every endpoint but the health checks."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Annotated

from cachetools import TTLCache
from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.types import Scope

from trainfleet.control.services.accounts import Accounts
from trainfleet.control.services.tokens import Principal, digest
from trainfleet.domain.errors import Unauthorized
from trainfleet.server.errors import ApiError
from trainfleet.server.sessions import COOKIE, CSRF_HEADER, Sessions

bearer = HTTPBearer(
    auto_error=False,
    description="A token from the server's first start, or from `trainfleet token create`.",
)


class TokenRefused(ApiError, Unauthorized):
    """401: no token, or one that is unknown or revoked (or its user disabled); ``reason``
    says which in a few words, for the audit trail."""

    def __init__(self, reason: str, detail: str = "", error: str = "") -> None:
        super().__init__(401, detail or reason, _challenge(error))
        self.reason = reason


class SessionRefused(TokenRefused):
    """403: a change made with a session cookie but without its CSRF token."""

    def __init__(self, detail: str = "") -> None:
        detail = (
            detail or f"a change made in the dashboard needs its session's {CSRF_HEADER} header"
        )
        ApiError.__init__(self, 403, detail)
        self.reason = "no CSRF token"


TOKEN_CACHE_SECONDS = 2.0
"""How long a looked-up token is trusted without asking the store again: a token revoked
(by ``trainfleet token revoke``, possibly in another process) stops working this soon."""


class Tokens:
    """Checks bearer tokens against the accounts, caching lookups briefly.

    The store is shared with the jobs' threads, and a query per request would make every
    request wait for it.
    """

    def __init__(self, accounts: Accounts, sessions: Sessions | None = None) -> None:
        self.accounts = accounts
        self.sessions = sessions
        self.page_only: set[str] = set()
        """Digests of tokens that sign the dashboard in, once, and are no bearer tokens."""
        self.unused: set[str] = set()
        self.known: TTLCache[str, tuple[Principal | None]] = TTLCache(
            maxsize=10_000, ttl=TOKEN_CACHE_SECONDS
        )
        self._known_lock = threading.Lock()
        """The cache is read by the event loop and by threads (the proxy's checks)."""

    def check(self, credentials: str | None) -> Principal:
        """Who holds the valid, unrevoked token ``credentials`` (its user enabled);
        TokenRefused (401) if nobody."""
        if credentials is None:
            raise TokenRefused(
                "no token", "this server needs a token: Authorization: Bearer <token>"
            )
        key = digest(credentials)
        if key in self.page_only:
            raise TokenRefused("page-only token", "this token only signs the dashboard in")
        return self.check_digest(key)

    def sign_in_once(self, token: str) -> None:
        """``token`` signs one dashboard in (``trainfleet ui``'s link), and nothing else."""
        self.page_only.add(digest(token))
        self.unused.add(digest(token))

    def sign_in(self, token: str) -> Principal:
        """Who may open a session with ``token``: its holder, once for a page-only token."""
        key = digest(token)
        if key not in self.page_only:
            return self.check(token)
        if key not in self.unused:
            raise TokenRefused(
                "used sign-in link", "this sign-in link was used: run `trainfleet ui` again"
            )
        self.unused.discard(key)
        return self.check_digest(key)

    def check_digest(self, key: str) -> Principal:
        """As ``check``, for the token with digest ``key``."""
        with self._known_lock:  # one look: an entry found may expire before a second
            cached = self.known.get(key)
        if cached is None:
            cached = (self.accounts.principal(key),)  # (None,): no such token, cached too
            with self._known_lock:
                self.known[key] = cached
        principal = cached[0]
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

    def check_scope(self, scope: Scope) -> Principal:
        """Who sends this request: its bearer token's holder, else its session's (a change
        in a session needs the session's CSRF token: SessionRefused)."""
        headers = Headers(scope=scope)
        authorization = headers.get("authorization")
        cookie = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        if authorization is not None or cookie is None or self.sessions is None:
            return self.check_header(authorization)
        session = self.sessions.open(cookie)
        if session is None:
            raise TokenRefused("ended session", "the session has ended: sign in again")
        if not session.allows(scope.get("method", "GET"), headers.get(CSRF_HEADER)):
            raise SessionRefused()
        return self.check_digest(session.digest)


OnRefusal = Callable[[Scope, TokenRefused], Awaitable[None]]
"""What to do of a request refused for its token (record it), before it is answered."""


async def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Principal:
    """Who calls: 401 unless the request has a valid, unrevoked token or session (each
    refusal is recorded by the application's auditor). ``credentials`` declares the bearer
    scheme in the OpenAPI document; the request itself is read by ``Tokens.check_scope``."""
    tokens: Tokens = request.app.state.tokens
    try:
        return tokens.check_scope(request.scope)
    except TokenRefused as error:
        await request.app.state.auditor.refused(request.scope, error)
        raise


Who = Annotated[Principal, Depends(authenticate)]
"""The caller of an endpoint, authenticated."""


def _challenge(error: str = "") -> dict[str, str]:
    value = 'Bearer realm="trainfleet"' + (f', error="{error}"' if error else "")
    return {"WWW-Authenticate": value}
