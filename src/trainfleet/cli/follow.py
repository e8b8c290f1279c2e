"""Following a job from the store: its events and its tasks' logs, prefixed ``role/index |``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from trainfleet.control.engine import Engine
from trainfleet.store.logs import LogTail
from trainfleet.store.records import EventRecord


@dataclass
class LogFollower:
    """Tails the logs of chosen tasks; ``read`` returns prefixed complete lines."""

    engine: Engine
    job_id: str
    tasks: Iterable[tuple[str, int]]
    width: int = 0
    _tails: list[tuple[bytes, LogTail]] = field(default_factory=list)

    def __post_init__(self) -> None:
        keys = list(self.tasks)
        width = self.width or max((len(f"{role}/{index}") for role, index in keys), default=0)
        for role, index in keys:
            prefix = f"{role}/{index}".ljust(width).encode() + b" | "
            self._tails.append((prefix, LogTail(self.engine.log_path(self.job_id, role, index))))

    def read(self, final: bool = False) -> bytes:
        """New output of every task; with ``final``, everything left including partial lines."""
        chunks = []
        for prefix, tail in self._tails:
            while True:
                data = tail.read(final=final)
                if data:
                    chunks.append(_prefixed(prefix, data))
                if not final or tail.exhausted():
                    break
        return b"".join(chunks)


def _prefixed(prefix: bytes, data: bytes) -> bytes:
    body = data[:-1] if data.endswith(b"\n") else data
    return prefix + body.replace(b"\n", b"\n" + prefix) + b"\n"


@dataclass
class EventFollower:
    """Returns a job's events not seen yet."""

    engine: Engine
    job_id: str
    last: int = 0

    def read(self) -> list[EventRecord]:
        events = self.engine.store.list_events(self.job_id, after=self.last)
        if events:
            self.last = events[-1].id
        return events


def describe_event(event: EventRecord) -> str:
    """``worker/1 restarting: exit code 137 (SIGKILL); restarting in 1s``."""
    subject = event.task or "job"
    return f"{subject} {event.state}" + (f": {event.message}" if event.message else "")
