"""How much of a flood gets recorded: a few events a minute from each source, and from all
sources together; the rest are counted, and the next event recorded says how many. The
audit trail keeps one for failed authentications (by address) and one for refusals to
valid tokens (by user).

Memory is bounded: at most ``sources`` sources are remembered (the least recent is
forgotten first, its count carried into the next event recorded from anywhere).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class _Window:
    start: float
    admitted: int = 0
    skipped: int = 0


class Skipped(NamedTuple):
    """Events left out before the one admitted: of its source, and of sources forgotten."""

    here: int = 0
    elsewhere: int = 0


class Throttle:
    """Admits at most ``per_source`` events from one source and ``overall`` from all in
    each window of ``seconds``; safe to share by threads."""

    def __init__(
        self,
        per_source: int = 10,
        overall: int = 100,
        seconds: float = 60.0,
        sources: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_source = per_source
        self.overall = overall
        self.seconds = seconds
        self.sources = sources
        self.clock = clock
        """Seconds, as ``admit`` reads them where it is not told the time."""
        self._windows: OrderedDict[str, _Window] = OrderedDict()
        self._all = _Window(start=-seconds)
        self._forgotten = 0
        self._lock = threading.Lock()

    def admit(self, source: str, now: float | None = None) -> Skipped | None:
        """None where this event is to be left out (it is counted); else what was left
        out before it, which its record should mention."""
        now = self.clock() if now is None else now
        with self._lock:
            window = self._windows.pop(source, None) or _Window(start=now)
            self._windows[source] = window  # the most recent last
            if len(self._windows) > self.sources:
                _, oldest = self._windows.popitem(last=False)
                self._forgotten += oldest.skipped
            for each in (window, self._all):
                if now - each.start >= self.seconds:
                    each.start, each.admitted = now, 0
            if window.admitted >= self.per_source or self._all.admitted >= self.overall:
                window.skipped += 1
                return None
            window.admitted += 1
            self._all.admitted += 1
            skipped = Skipped(window.skipped, self._forgotten)
            window.skipped = self._forgotten = 0
            return skipped
