"""Reading task logs: a byte range, or what was appended since the last read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20


def read_range(path: Path, start: int = 0, end: int | None = None) -> bytes:
    """Bytes ``start``..``end`` of a log; empty when the log does not exist yet."""
    try:
        with path.open("rb") as log:
            log.seek(start)
            return log.read() if end is None else log.read(max(0, end - start))
    except FileNotFoundError:
        return b""


def lines_end(data: bytes, limit: int) -> int:
    """Where the complete lines of ``data`` end; all of it when it is one line of ``limit``
    bytes or more (passed on in pieces rather than held back for ever)."""
    cut = data.rfind(b"\n") + 1
    return len(data) if cut == 0 and len(data) >= limit else cut


class LogTail:
    """Follows one log file: each ``read`` returns the complete lines appended since the last.

    A partial last line is held back until its newline arrives or ``read(final=True)``.
    A log cut back below what was read (its output passed the cap, see ``shim.Capture``)
    is followed on from its new end.
    """

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""
        self._file: BinaryIO | None = None

    def read(self, final: bool = False, limit: int = CHUNK) -> bytes:
        fresh = self._read(limit)
        data = self._partial + fresh
        self.offset += len(fresh)
        if final and len(fresh) < limit:  # the end of what was written: flush it all
            self._partial = b""
            return data
        cut = lines_end(data, limit)
        self._partial = data[cut:]
        return data[:cut]

    def _read(self, limit: int) -> bytes:
        if self._file is None:
            try:
                self._file = self.path.open("rb")
            except FileNotFoundError:
                return b""
            self._file.seek(self.offset)
        data = self._file.read(limit)
        if not data and os.fstat(self._file.fileno()).st_size < self.offset:
            self.offset, self._partial = self._file.seek(0, os.SEEK_END), b""
        return data

    def pending(self) -> int:
        """How many bytes were written that have not been read yet."""
        return max(0, self._size() - self.offset) + len(self._partial)

    def skip(self, keep: int) -> int:
        """Jump to the first line that starts in the last ``keep`` bytes; returns bytes skipped."""
        start = self.offset - len(self._partial)
        end = start + self.pending()
        target = end - keep
        if target <= start:
            return 0
        newline = self._range(target, end).find(b"\n")
        self.offset, self._partial = (target + newline + 1 if newline >= 0 else target), b""
        if self._file is not None:
            self._file.seek(self.offset)
        return self.offset - start

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def _range(self, start: int, end: int) -> bytes:
        return read_range(self.path, start, end)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
