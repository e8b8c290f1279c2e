"""One reader per followed log, shared by all of its followers.

Each log followed has one ``SharedLog``: one open file, and once per poll interval one
look-up of the job and one read of what was appended, kept in a bounded window. Followers
take their bytes from that window; one that fell behind it reads by offset from the same
file (resuming, never buffering without bound). The last follower to leave closes it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from trainfleet.datadir.logs import CHUNK
from trainfleet.domain.records import JobRecord, State

WINDOW = CHUNK
"""Most bytes of a log kept in memory for its followers (the latest ones): the output of
10 MiB/s at the default poll interval; followers behind it read by offset."""
READ = 256 << 10
"""Most bytes of a log one follower takes in one poll: one message, sent before the next
poll reads more, so that a follower holds about this much memory however big its log."""


class Seen(NamedTuple):
    """What the last refresh of a log found."""

    job: JobRecord | None
    complete: bool
    """The job had ended before the read, and the read reached the log's end."""
    end: int
    """The offset up to which the log was read (its true end once ``complete``)."""


class SharedLog:
    """A log's single reader: ``refresh`` reads at most once per interval, ``read`` serves."""

    def __init__(
        self,
        path: Path,
        lookup: Callable[[], JobRecord | None],
        interval: float,
        window: int = WINDOW,
    ):
        self.path = path
        self.lookup = lookup
        self.interval = interval
        self.window = window
        self.followers = 0
        self.job: JobRecord | None = None
        self.complete = False
        """The job had ended before the last read, and that read reached the end."""
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._window = b""
        self._start = 0  # the log offset of the window's first byte
        self._refreshed = -float("inf")

    @property
    def end(self) -> int:
        """The offset up to which the log has been read."""
        return self._start + len(self._window)

    def refresh(self) -> Seen:
        """Look the job up and read what was appended, unless done less than an interval
        ago; what was found, as one consistent view."""
        with self._lock:
            now = time.monotonic()
            if now - self._refreshed >= self.interval:
                self._refreshed = now
                self._refresh()
            return Seen(self.job, self.complete, self.end)

    def _refresh(self) -> None:
        """Look the job up, then read what was appended (the window keeps the last bytes)."""
        self.job = self.lookup()  # before the read: a final state means the log is complete
        final = self.job is None or State(self.job.state).is_final
        size = self._size()
        if size < self.end:  # cut back (its output passed the cap): go on from its end
            self._window, self._start = b"", size
        if size - self.end > self.window:  # far behind: followers read it by offset
            self._window, self._start = b"", size - self.window
        fresh = self._pread(self.end, size - self.end) if size > self.end else b""
        end = self.end + len(fresh)
        self._window = (self._window + fresh)[-self.window :]
        self._start = end - len(self._window)
        self.complete = final and end >= size

    def read(self, offset: int, limit: int) -> bytes:
        """Up to ``limit`` bytes from ``offset``, no further than the last refresh read."""
        with self._lock:
            end = self.end
            if offset >= end:
                return b""
            if offset >= self._start:
                return self._window[offset - self._start : offset - self._start + limit]
            return self._pread(offset, min(limit, self._start - offset))

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _size(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return 0
        return os.fstat(self._fd).st_size

    def _pread(self, offset: int, limit: int) -> bytes:
        if self._fd is None or limit <= 0:
            return b""
        return os.pread(self._fd, limit, offset)


class LogHub:
    """The shared readers of the logs being followed, by path."""

    def __init__(self, interval: float, window: int = WINDOW) -> None:
        self.interval = interval
        self.window = window
        self._logs: dict[Path, SharedLog] = {}
        self._lock = threading.Lock()

    def join(self, path: Path, lookup: Callable[[], JobRecord | None]) -> SharedLog:
        """The reader of ``path``, made for the first follower."""
        with self._lock:
            shared = self._logs.get(path)
            if shared is None:
                shared = self._logs[path] = SharedLog(path, lookup, self.interval, self.window)
            shared.followers += 1
            return shared

    def leave(self, shared: SharedLog) -> None:
        """A follower is gone; the last one's leaving closes the reader."""
        with self._lock:
            shared.followers -= 1
            if shared.followers > 0:
                return
            del self._logs[shared.path]
        shared.close()

    def __len__(self) -> int:
        return len(self._logs)
