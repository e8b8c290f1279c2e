"""What the follow endpoints stream: a task's new log lines, a job's new events."""

from __future__ import annotations

import codecs
from pathlib import Path

from fastapi.sse import ServerSentEvent

from trainfleet.control.services.reads import JobReads
from trainfleet.datadir.logs import lines_end
from trainfleet.domain.records import JobNotFound, JobRecord, State
from trainfleet.server.hub import READ, LogHub, SharedLog
from trainfleet.server.sse import Poll
from trainfleet.wire import ErrorBody, JobEnd, LogChunk


class _JobFeed:
    """The part both feeds share: the job's state, and the message that ends the stream."""

    def __init__(self, jobs: JobReads, job_id: str) -> None:
        self.jobs = jobs
        self.job_id = job_id

    def job(self) -> JobRecord | None:
        try:
            return self.jobs.get(self.job_id)
        except JobNotFound:
            return None

    def close(self) -> None:
        """Release what the feed holds open."""

    def end(self, job: JobRecord | None) -> ServerSentEvent:
        if job is None:  # deleted while followed
            return ServerSentEvent(event="error", data=ErrorBody(detail=f"no job {self.job_id!r}"))
        end = JobEnd(job_id=job.id, state=State(job.state), code=job.code, reason=job.reason)
        return ServerSentEvent(event="end", data=end)


class LogFeed(_JobFeed):
    """New complete lines of one task's log; the rest of it once the job has ended.

    The bytes come from the log's ``SharedLog`` in ``hub``: one reader for all followers.
    Each poll reads at most ``read`` bytes (and passes on a line longer than that in
    pieces). The stream ends only at the log's true end: its size once the job has ended.
    Each message's ``id`` is the byte offset after it, for Last-Event-ID to resume from.
    """

    def __init__(
        self,
        jobs: JobReads,
        job_id: str,
        hub: LogHub,
        path: Path,
        offset: int,
        read: int = READ,
    ) -> None:
        super().__init__(jobs, job_id)
        self.hub = hub
        self.shared: SharedLog | None = hub.join(path, self.job)
        self.read = read
        self.offset = offset  # after the last byte sent
        self.read_to = offset  # after the last byte taken from the shared reader
        self.partial = b""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def poll(self) -> Poll:
        assert self.shared is not None, "polled after close"
        seen = self.shared.refresh()
        if self.read_to > seen.end:  # the log was cut back: go on from its new end
            self.read_to = self.offset = seen.end
            self.partial = b""
        fresh = self.shared.read(self.read_to, self.read)
        self.read_to += len(fresh)
        at_end = seen.complete and self.read_to >= seen.end
        data = self._lines(self.partial + fresh, at_end)
        self.offset += len(data)
        text = self.decoder.decode(data)
        messages = [self._chunk(text)] if data else []
        if not at_end:
            return Poll(messages, more=bool(fresh) and self.read_to < seen.end)
        rest = self.decoder.decode(b"", final=True)
        if rest:
            messages.append(self._chunk(rest))
        return Poll([*messages, self.end(seen.job)], done=True)

    def _lines(self, data: bytes, at_end: bool) -> bytes:
        """The complete lines of ``data``, the rest kept for later; all of it ``at_end``
        (of a complete log)."""
        if at_end:
            self.partial = b""
            return data
        cut = lines_end(data, self.read)
        self.partial = data[cut:]
        return data[:cut]

    def _chunk(self, text: str) -> ServerSentEvent:
        chunk = LogChunk(text=text, offset=self.offset)
        return ServerSentEvent(event="log", data=chunk, id=str(self.offset))

    def close(self) -> None:
        if self.shared is not None:
            self.hub.leave(self.shared)
            self.shared = None


class EventFeed(_JobFeed):
    """A job's events after a given id, until the job has ended and all were sent."""

    def __init__(self, jobs: JobReads, job_id: str, after: int) -> None:
        super().__init__(jobs, job_id)
        self.after = after

    def poll(self) -> Poll:
        job = self.job()  # read before the events: a final state's event is then among them
        events = self.jobs.events(self.job_id, after=self.after)
        if events:
            self.after = events[-1].id
        messages = [ServerSentEvent(event="event", data=e, id=str(e.id)) for e in events]
        if job is None or State(job.state).is_final:
            return Poll([*messages, self.end(job)], done=True)
        return Poll(messages)
