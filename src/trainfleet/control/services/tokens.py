"""Bearer tokens: making them, storing only their digest, and finding whose one is.

A token is 32 random bytes (``secrets.token_urlsafe``). The store keeps only its SHA-256:
for a secret of that entropy a plain hash cannot be reversed or guessed, so the slow,
salted hashes that passwords need (bcrypt, scrypt) would add cost and no safety.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainfleet.control.access import Caller
from trainfleet.domain.records import TokenRecord

if TYPE_CHECKING:
    from trainfleet.store.database import Store


def new_token() -> str:
    """A fresh random token: 43 URL-safe characters."""
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    """What the store keeps of a token (see the module docstring for why SHA-256 suffices)."""
    return hashlib.sha256(token.encode()).hexdigest()


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
