"""What the store raises, whatever the database behind it."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The database cannot be used: unreachable, unreadable, or written by a newer trainfleet."""


class StoreConflict(StoreError):
    """A write was refused because a row with the same key already exists."""


class MissingTable(StoreError):
    """A query named a table that the database does not have (yet)."""
