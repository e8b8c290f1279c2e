"""The server's brief cache of looked-up tokens (``Tokens.known``): an entry that expires
while a request reads it, and many threads reading it at once."""

from __future__ import annotations

import itertools
import threading
from typing import Any, cast

from cachetools import TTLCache

from trainfleet.control.services.accounts import Accounts
from trainfleet.control.services.tokens import digest
from trainfleet.server.auth import TOKEN_CACHE_SECONDS, Tokens


class CountingAccounts:
    """Stands in for the accounts: every token is the same holder's; counts the store's
    lookups. (The store itself is not the point here.)"""

    def __init__(self) -> None:
        self.asked = 0
        self.holder = object()

    def principal(self, token_digest: str) -> Any:
        self.asked += 1
        return self.holder


def test_an_entry_that_expires_between_two_looks_is_looked_up_again() -> None:
    """The clock moves past the entry's end between any two readings of it (a request
    preempted at that moment): a check read the entry twice, found it, then met a KeyError
    on the second reading (a 500; stop 54's CI, once, in a test that polled a job)."""
    accounts = CountingAccounts()
    tokens = Tokens(cast(Accounts, accounts))
    steps = itertools.count()
    tokens.known = TTLCache(maxsize=10, ttl=1.0, timer=lambda: next(steps) * 0.6)  # per reading
    assert tokens.check("secret") is accounts.holder  # missed at 0, stored at 0.6 until 1.6
    assert tokens.check("secret") is accounts.holder  # found at 1.2 (where read twice: 1.8)
    assert accounts.asked == 1
    assert tokens.check("secret") is accounts.holder  # gone at 1.8, asked again
    assert accounts.asked == 2


def test_threads_checking_tokens_at_once_all_get_answers() -> None:
    """The proxy checks tokens on the threadpool while the event loop checks others."""
    accounts = CountingAccounts()
    tokens = Tokens(cast(Accounts, accounts))
    tokens.known = TTLCache(maxsize=10_000, ttl=TOKEN_CACHE_SECONDS / 1000)  # always expiring
    errors: list[BaseException] = []

    def check_many(worker: int) -> None:
        try:
            for n in range(2000):
                assert tokens.check_digest(digest(f"token-{worker}-{n % 50}")) is accounts.holder
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=check_many, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
