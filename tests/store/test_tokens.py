"""API tokens: only digests are stored; a revoked token keeps its record and revoke time."""

from __future__ import annotations

import pytest

from trainfleet.domain.records import TokenRecord
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreConflict


def _token(token_id: str, digest: str, admin: bool = False, created_at: float = 1.0) -> TokenRecord:
    return TokenRecord(
        id=token_id, name=f"{token_id}'s", digest=digest, admin=admin, created_at=created_at
    )


def test_tokens_round_trip(store: Store) -> None:
    admin, user = _token("t-admin", "d1", admin=True), _token("t-user", "d2", created_at=2.0)
    store.add_token(user)
    store.add_token(admin)
    assert store.token_by_digest("d1") == admin and store.token_by_digest("d1").admin is True  # type: ignore[union-attr]
    assert store.token_by_digest("d2") == user and store.token_by_digest("d2").admin is False  # type: ignore[union-attr]
    assert store.token_by_digest("nope") is None
    assert store.list_tokens() == [admin, user]  # oldest first


def test_revoke_marks_the_token_once_and_keeps_it(store: Store) -> None:
    store.add_token(_token("t-1", "d1"))
    store.add_token(_token("t-2", "d2"))
    assert store.revoke_token("t-1") is True
    revoked = store.token_by_digest("d1")
    assert revoked is not None and revoked.revoked and revoked.revoked_at is not None
    assert store.revoke_token("t-1") is False  # already revoked: the first time stays
    assert store.token_by_digest("d1") == revoked
    assert store.revoke_token("nope") is False
    assert [t.revoked for t in store.list_tokens()] == [True, False]


def test_a_taken_id_or_digest_is_refused(store: Store) -> None:
    store.add_token(_token("t-1", "d1"))
    with pytest.raises(StoreConflict):
        store.add_token(_token("t-2", "d1"))
    with pytest.raises(StoreConflict):
        store.add_token(_token("t-1", "d9"))
    assert [t.id for t in store.list_tokens()] == ["t-1"]
