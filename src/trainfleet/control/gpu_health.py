"""Whether each GPU of this machine is healthy: what its driver reports now, less what an
operator cleared (``datadir.gpu_marks``). The scheduler places nothing new on an
unhealthy GPU; ``unhealthy`` says which they are, for whoever must act on their tasks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from trainfleet.backends.gpu_readings import GpuReader, GpuReading
from trainfleet.datadir import gpu_marks
from trainfleet.domain.errors import NotFound

HEALTH_SECONDS = 2.0
"""How long ``unhealthy`` trusts its last look (a scheduling pass asks before each)."""


@dataclass(frozen=True)
class GpuLook:
    """One GPU now: its reading, its problems an operator has not cleared, what was cleared."""

    reading: GpuReading
    problems: tuple[str, ...]
    cleared: gpu_marks.Cleared | None = None

    @property
    def healthy(self) -> bool:
        return not self.problems


class GpuHealth:
    """The health of the GPUs ``reader`` reads (none without one), with the marks kept in
    the data directory ``root``."""

    def __init__(
        self,
        root: Path,
        reader: GpuReader | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = root
        self.reader = reader
        self.clock = clock
        self._lock = threading.Lock()
        self._unhealthy: frozenset[int] = frozenset()
        self._looked = float("-inf")

    def look(self) -> list[GpuLook]:
        """Each GPU read now, with its health; cleared problems that went away are forgotten."""
        readings = self._read()
        noted = gpu_marks.noted(self.root)
        readings = [_with_noted(r, noted.get(r.index, ())) for r in readings]
        marks = gpu_marks.read(self.root)
        if any(_gone(marks[r.index], r) for r in readings if r.index in marks):
            marks = gpu_marks.change(self.root, lambda now: _forget_gone(now, readings))
        looks = [_look(reading, marks.get(reading.index)) for reading in readings]
        with self._lock:
            self._unhealthy = frozenset(look.reading.index for look in looks if not look.healthy)
            self._looked = self.clock()
        return looks

    def _read(self) -> list[GpuReading]:
        """Each GPU read now; what its driver reported once (an Xid) noted on disk."""
        readings = self.reader.read_gpus() if self.reader is not None else []
        reported = {r.index: r.events for r in readings if r.events}
        if reported:
            gpu_marks.note(self.root, reported)
        return readings

    def unhealthy(self) -> frozenset[int]:
        """The host indices of the unhealthy GPUs (looked at again after HEALTH_SECONDS)."""
        if self.reader is None:
            return frozenset()
        with self._lock:
            fresh = self.clock() - self._looked < HEALTH_SECONDS
            if fresh:
                return self._unhealthy
        self.look()
        return self._unhealthy

    def clear(self, index: int, by: str = "") -> GpuLook:
        """Ignore the problems GPU ``index`` has now and forget those its driver reported
        once (an operator's word that it is well); NotFound where there is no such GPU."""
        readings = {r.index: r for r in self._read()}
        if index not in readings:
            known = ", ".join(str(i) for i in sorted(readings)) or "none"
            raise NotFound(f"index: no GPU {index} here (GPUs: {known})")
        reading = readings[index]
        cleared = gpu_marks.Cleared(reading.problems, time.time(), by)

        def mark(marks: gpu_marks.Marks) -> gpu_marks.Marks:
            if cleared.problems:
                marks[index] = cleared
            else:  # nothing to ignore
                marks.pop(index, None)
            return marks

        gpu_marks.change(self.root, mark)
        gpu_marks.forget(self.root, index)
        with self._lock:
            self._looked = float("-inf")
        return _look(reading, cleared)


def _with_noted(reading: GpuReading, noted: tuple[str, ...]) -> GpuReading:
    """The reading with the one-off problems noted of its GPU (an Xid) among its own."""
    extra = tuple(p for p in noted if p not in reading.problems)
    return replace(reading, problems=reading.problems + extra) if extra else reading


def _look(reading: GpuReading, cleared: gpu_marks.Cleared | None) -> GpuLook:
    ignored = set(cleared.problems) if cleared else set()
    problems = tuple(p for p in reading.problems if p not in ignored)
    return GpuLook(reading, problems, cleared)


def _gone(cleared: gpu_marks.Cleared, reading: GpuReading) -> bool:
    return bool(set(cleared.problems) - set(reading.problems))


def _forget_gone(marks: gpu_marks.Marks, readings: list[GpuReading]) -> gpu_marks.Marks:
    """The marks without the cleared problems their GPU no longer has."""
    for reading in readings:
        cleared = marks.get(reading.index)
        if cleared is None or not _gone(cleared, reading):
            continue
        kept = tuple(p for p in cleared.problems if p in reading.problems)
        if kept:
            marks[reading.index] = gpu_marks.Cleared(kept, cleared.at, cleared.by)
        else:
            del marks[reading.index]
    return marks
