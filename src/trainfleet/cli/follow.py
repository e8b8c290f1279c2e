"""Following a job's events in any JobService (its logs: ``datadir.follow``)."""

from __future__ import annotations

from dataclasses import dataclass

from trainfleet.cli.service import JobReader
from trainfleet.domain.records import EventRecord


@dataclass
class EventFollower:
    """Returns a job's events not seen yet."""

    service: JobReader
    job_id: str
    last: int = 0

    def read(self) -> list[EventRecord]:
        events = self.service.events(self.job_id, self.last)
        if events:
            self.last = events[-1].id
        return events


def describe_event(event: EventRecord) -> str:
    """``worker/1 restarting: exit code 137 (SIGKILL); restarting in 1s``."""
    subject = event.task or "job"
    return f"{subject} {event.state}" + (f": {event.message}" if event.message else "")
