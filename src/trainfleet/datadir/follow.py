"""Following tasks' logs as one stream of complete lines, each prefixed ``role/index |``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from trainfleet.datadir.logs import CHUNK, LogTail


class LogSource(Protocol):
    """Where tasks' logs are read: the data directory here, or a server."""

    def log_tail(self, job_id: str, role: str, index: int) -> LogTail:
        """A reader of one task's log, from its start."""
        ...


@dataclass
class LogFollower:
    """Tails the logs of chosen tasks; ``read`` returns prefixed complete lines."""

    service: LogSource
    job_id: str
    tasks: Iterable[tuple[str, int]]
    width: int = 0
    behind: int = 8 << 20
    keep: int = 64 << 10
    per_read: int = 256 << 10
    _tails: list[tuple[bytes, LogTail]] = field(default_factory=list)

    def __post_init__(self) -> None:
        keys = list(self.tasks)
        width = self.width or max((len(f"{role}/{index}") for role, index in keys), default=0)
        for role, index in keys:
            prefix = f"{role}/{index}".ljust(width).encode() + b" | "
            self._tails.append((prefix, self.service.log_tail(self.job_id, role, index)))

    def read(self, final: bool = False) -> Iterator[bytes]:
        """New output of every task, in pieces.

        A live view must never slow training down: it reads at most ``per_read`` bytes of
        a task each time (a few MiB a second, more than anyone reads; copying 2 MiB a time
        slowed a task writing 1 GiB by 7-15% on two cores), and a task more than
        ``behind`` bytes ahead of the view is skipped to its last ``keep`` bytes, with a
        line that says so (the log file keeps everything). With ``final``, everything left
        is read, partial last lines included, and the tails close.
        """
        limit = CHUNK if final else min(CHUNK, self.per_read)
        for prefix, tail in self._tails:
            if not final and tail.pending() > self.behind:
                skipped = tail.skip(self.keep)
                yield prefix + _skipped_note(skipped, self.job_id, prefix)
            while data := tail.read(final=final, limit=limit):
                yield from _prefixed(prefix, data)
                if not final:
                    break
            if final:
                tail.close()


def _skipped_note(skipped: int, job_id: str, prefix: bytes) -> bytes:
    role, _, index = prefix.decode().split(" ", 1)[0].partition("/")
    return (
        f"[trainfleet: {skipped / 2**20:.1f} MiB of output skipped to keep up; all of it: "
        f"trainfleet logs {job_id} --role {role} --index {index}]\n"
    ).encode()


def _prefixed(prefix: bytes, data: bytes) -> tuple[bytes, bytes, bytes]:
    body = data[:-1] if data.endswith(b"\n") else data
    return prefix, body.replace(b"\n", b"\n" + prefix), b"\n"
