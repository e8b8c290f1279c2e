"""What the store raises, whatever the database behind it."""

from __future__ import annotations

from trainfleet.domain.errors import Conflict, Unavailable


class StoreError(Unavailable):
    """The database cannot be used: unreachable, unreadable, or written by a newer trainfleet."""


class StoreUnavailable(StoreError):
    """The database cannot be reached now (stopped, restarting, cut off or locked): the same
    call may succeed later. Raised once a call has waited for it as long as it may."""


class StoreConflict(Conflict, StoreError):
    """A write was refused because a row with the same key already exists."""


class MissingTable(StoreError):
    """A query named a table that the database does not have (yet)."""
