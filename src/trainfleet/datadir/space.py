"""Room on the data directory's disk: new work is refused before the disk is full."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from trainfleet.domain.errors import StorageFull
from trainfleet.domain.records import Reason

MIN_FREE = 16 << 20
"""Bytes that must stay free in the data directory for a job to be stored or started."""

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(StorageFull, OSError):
    """The data directory's disk has no room for more work; the message says where."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type[DiskFull], tuple[str]]:
        return (DiskFull, (self.message,))  # OSError's own takes (errno, message)


def require_free(path: Path, minimum: int = MIN_FREE) -> None:
    """Raise DiskFull when the disk that holds ``path`` has less than ``minimum`` bytes free."""
    free = shutil.disk_usage(path).free
    if free < minimum:
        raise DiskFull(
            f"{Reason.DISK_FULL}: {free / 2**20:.1f} MiB free in {path}, "
            f"at least {minimum / 2**20:.0f} MiB needed; free some space and try again"
        )


def is_disk_full(error: OSError) -> bool:
    return isinstance(error, DiskFull) or error.errno in DISK_FULL
