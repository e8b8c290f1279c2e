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


def last_attempt(run_dir: Path, role: str, index: int, suffixes: tuple[str, ...]) -> int | None:
    """The highest attempt of task ``role``/``index`` with a record ending in one of
    ``suffixes`` in ``run_dir`` (prefixes are ``<role>-<index>-<attempt>``)."""
    prefix = f"{role}-{index}-"
    attempts = [
        int(number)
        for path in run_dir.glob(f"{prefix}*")
        if path.suffix in suffixes
        and (number := path.name[len(prefix) : -len(path.suffix)]).isdigit()
    ]
    return max(attempts, default=None)


def remove_mask_files(jobs: Path) -> int:
    """Delete the ``<prefix>.mask`` files (secret values, in base64) that earlier versions
    wrote for a shim to read, and left where its attempt was stopped before it had: no
    shim reads one any more. How many there were."""
    removed = 0
    for path in jobs.glob("*/run/*.mask"):
        path.unlink(missing_ok=True)
        removed += 1
    return removed
