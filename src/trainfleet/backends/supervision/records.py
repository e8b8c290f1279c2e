"""Supervision records of a task attempt: ``<prefix>.pid`` and ``<prefix>.exit``."""

from __future__ import annotations

from pathlib import Path


def read_number(path: Path) -> int | None:
    """The integer in a record file, or None when it is missing or unreadable."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def exit_status(record: Path) -> int | None:
    """How the attempt ended (a returncode: negative for a signal), if it has."""
    return read_number(record.with_name(record.name + ".exit"))


def supervisor_pid(record: Path) -> int | None:
    return read_number(record.with_name(record.name + ".pid"))
