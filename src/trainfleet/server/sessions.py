"""The dashboard's sign-in: a token given once becomes an HttpOnly, SameSite=Strict session
cookie, and every change made with that cookie carries the session's CSRF token.

The cookie is sealed (Fernet: encrypted and authenticated) with the key in
``<data dir>/session.key`` (made on first use, 0600; a new key signs everyone out), and holds
the token's digest, never the token, with the session's CSRF token. Nothing is kept on the
server: each request looks the token up as a bearer token's would be (``auth.Tokens``, 2 s
cache), so a revoked token or a disabled user ends its sessions within 2 s; a session ends
after ``SESSION_SECONDS`` whatever happens.
"""

from __future__ import annotations

import hmac
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from starlette.responses import Response

from trainfleet.vault.keys import read_key_file

COOKIE = "trainfleet_session"
CSRF_HEADER = "X-CSRF-Token"
SESSION_SECONDS = 12 * 3600
"""A session's whole life: then its user signs in again."""
KEY_FILE = "session.key"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: the only ones a session needs no CSRF token for."""


@dataclass(frozen=True)
class Session:
    """What a session cookie holds."""

    digest: str
    """The digest of the token it was signed in with."""
    csrf: str
    """What every change in this session must send in ``X-CSRF-Token``."""

    def allows(self, method: str, csrf: str | None) -> bool:
        """Whether a request of ``method`` with header value ``csrf`` may use this session."""
        return method in SAFE_METHODS or hmac.compare_digest(csrf or "", self.csrf)


class Sessions:
    """Seals and opens session cookies with one key."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    @classmethod
    def of_data_dir(cls, root: Path) -> Sessions:
        """With the key in ``root/session.key``, made when it does not exist."""
        return cls(read_key_file(root / KEY_FILE, create=True)[0])

    def new(self, digest: str) -> tuple[Session, str]:
        """A session of the token with ``digest``, and its cookie's value."""
        session = Session(digest, secrets.token_urlsafe(24))
        sealed = self._fernet.encrypt(json.dumps([session.digest, session.csrf]).encode())
        return session, sealed.decode()

    def open(self, cookie: str) -> Session | None:
        """The session of a cookie this server sealed less than SESSION_SECONDS ago; None
        for any other (expired, another server's, made up)."""
        try:
            digest, csrf = json.loads(self._fernet.decrypt(cookie.encode(), ttl=SESSION_SECONDS))
        except (InvalidToken, ValueError, TypeError):
            return None
        if not isinstance(digest, str) or not isinstance(csrf, str):
            return None
        return Session(digest, csrf)


def set_cookie(response: Response, value: str, secure: bool) -> None:
    """The session cookie on ``response``: the browser's only, for this server only."""
    response.set_cookie(
        COOKIE,
        value,
        max_age=SESSION_SECONDS,
        path="/",
        secure=secure,
        httponly=True,
        samesite="strict",
    )


def clear_cookie(response: Response, secure: bool) -> None:
    response.delete_cookie(COOKIE, path="/", secure=secure, httponly=True, samesite="strict")
