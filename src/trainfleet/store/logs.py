"""Reading task logs: a byte range, or what was appended since the last read."""

from __future__ import annotations

from pathlib import Path

CHUNK = 1 << 20


def read_range(path: Path, start: int = 0, end: int | None = None) -> bytes:
    """Bytes ``start``..``end`` of a log; empty when the log does not exist yet."""
    try:
        with path.open("rb") as log:
            log.seek(start)
            return log.read() if end is None else log.read(max(0, end - start))
    except FileNotFoundError:
        return b""


class LogTail:
    """Follows one log file: each ``read`` returns the complete lines appended since the last.

    A partial last line is held back until its newline arrives or ``read(final=True)``.
    """

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""

    def read(self, final: bool = False, limit: int = CHUNK) -> bytes:
        data = self._partial + read_range(self.path, self.offset, self.offset + limit)
        self.offset += len(data) - len(self._partial)
        if final:
            self._partial = b""
            return data
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) >= limit:
            cut = len(data)  # one line longer than a chunk: pass it on in pieces
        self._partial = data[cut:]
        return data[:cut]

    def exhausted(self) -> bool:
        """Whether every byte written so far has been read."""
        try:
            return self.path.stat().st_size <= self.offset
        except FileNotFoundError:
            return True
