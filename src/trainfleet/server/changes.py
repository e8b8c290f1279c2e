"""The change feed: every job's events, read from the store by one reader per server process
and passed on to each stream whose caller may see them.

``ChangeHub`` reads the events table at most once per poll interval, whatever the number of
streams, and keeps the latest ``keep`` events in memory. Each ``ChangeFeed`` (one stream)
holds only its position, the id of the last event it passed: it takes what follows from the
hub's memory. A stream that resumes from before that memory reads the store itself, a page
at a time, until it has caught up; a stream that falls behind it while open (a client that
stopped reading) is told that it lost events and must resync, and goes on from the newest.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter, deque

from fastapi.sse import ServerSentEvent

from trainfleet.control.access import Action
from trainfleet.control.services.accounts import Accounts
from trainfleet.control.services.reads import JobReads
from trainfleet.control.services.tokens import Principal
from trainfleet.domain.errors import Unavailable
from trainfleet.domain.records import EventRecord
from trainfleet.server.sse import Poll
from trainfleet.wire import FeedNotice, NoticeCode

KEEP = 10_000
"""Latest events kept in memory for the streams (about 5 MB)."""
BATCH = 500
"""Most events read from the store at once, and passed to one stream in one poll."""
STREAMS_PER_USER = 32
"""Most change-feed streams one user may hold open at once (429 beyond)."""


class ChangeHub:
    """The one reader of the events table for all streams, with the latest events."""

    def __init__(
        self,
        jobs: JobReads,
        interval: float,
        keep: int = KEEP,
        batch: int = BATCH,
        per_user: int = STREAMS_PER_USER,
    ) -> None:
        self.jobs = jobs
        self.interval = interval
        self.keep = keep
        self.batch = batch
        self.per_user = per_user
        self._ring: deque[EventRecord] = deque()
        self._floor: int | None = None  # every event with an id in (floor, end] is kept
        self._end = 0
        self._problem: str | None = None
        self._refreshed = -float("inf")
        self._lock = threading.Lock()  # the ring, briefly
        self._reading = threading.Lock()  # one read of the store at a time
        self._streams: Counter[str] = Counter()

    def refresh(self) -> str | None:
        """Read the new events unless that was done less than an interval ago (or is being
        done now: no stream waits on another's read); why the last read failed, if it did."""
        if not self._reading.acquire(blocking=False):
            return self._problem
        try:
            now = time.monotonic()
            if now - self._refreshed >= self.interval:
                self._refreshed = now
                try:
                    self._read()
                    self._problem = None
                except Unavailable as error:
                    self._problem = str(error)
            return self._problem
        finally:
            self._reading.release()

    def _read(self) -> None:
        if self._floor is None:
            newest = self.jobs.newest_change()
            with self._lock:
                self._floor = self._end = newest
        for _ in range(max(1, self.keep // self.batch)):  # at most ``keep`` per interval
            fresh = self.jobs.changes(self._end, self.batch)
            with self._lock:
                self._ring.extend(fresh)
                while len(self._ring) > self.keep:
                    self._floor = self._ring.popleft().id
                if fresh:
                    self._end = fresh[-1].id
            if len(fresh) < self.batch:
                return

    def since(self, after: int, limit: int) -> list[EventRecord] | None:
        """Up to ``limit`` kept events with an id above ``after``, oldest first; None where
        ``after`` is older than what is kept (or nothing was read yet)."""
        with self._lock:
            if self._floor is None or after < self._floor:
                return None
            start = bisect.bisect_right(self._ring, after, key=lambda event: event.id)
            return list(itertools.islice(self._ring, start, start + limit))

    @property
    def end(self) -> int:
        """The id of the newest event read."""
        return self._end

    def __len__(self) -> int:
        return len(self._ring)

    def admit(self, user: str) -> bool:
        """Count a new stream of ``user``'s; False (not counted) where it has too many."""
        with self._lock:
            if self._streams[user] >= self.per_user:
                return False
            self._streams[user] += 1
            return True

    def leave(self, user: str) -> None:
        """One of ``user``'s streams ended."""
        with self._lock:
            self._streams[user] -= 1
            if self._streams[user] <= 0:
                del self._streams[user]


class ChangeFeed:
    """One stream of the change feed: the events after ``after`` that ``who`` may see.

    ``allowed`` (the stream's recheck) asks the store again whether the token holds, and
    takes the caller's teams as they are now: a member taken out of a team stops seeing
    its jobs' changes within the recheck's second.
    """

    def __init__(
        self,
        hub: ChangeHub,
        accounts: Accounts,
        who: Principal,
        after: int,
        notices: list[FeedNotice] | None = None,
    ) -> None:
        self.hub = hub
        self.accounts = accounts
        self.who = who
        self.caller = who.caller
        self.after = after
        self.notices = list(notices or [])
        self.catching_up = True
        self.down = False
        self.closed = False

    def allowed(self) -> bool:
        """Whether the caller's token still holds (its user enabled), asked of the store."""
        try:
            now = self.accounts.principal(self.who.token.digest)
        except Unavailable:
            return True  # no one can revoke or disable without the store either
        if now is None:
            return False
        self.caller = now.caller
        return True

    def poll(self) -> Poll:
        problem = self.hub.refresh()
        events = self.hub.since(self.after, self.hub.batch)
        if events is not None:
            self.catching_up = False
        elif self.catching_up:  # resumed from before what the hub keeps: from the store
            try:
                events = self.hub.jobs.changes(self.after, self.hub.batch)
            except Unavailable as error:
                problem, events = problem or str(error), []
        else:
            self._lost()
            events = self.hub.since(self.after, self.hub.batch) or []
        self._outage(problem)
        messages = [self._notice(notice) for notice in self.notices]
        self.notices.clear()
        for event in events:
            if self.caller.sees(Action.READ_JOB, event.team):
                messages.append(ServerSentEvent(event="change", data=event, id=str(event.id)))
        if events:
            self.after = events[-1].id
        return Poll(messages, more=len(events) == self.hub.batch)

    def _lost(self) -> None:
        """The stream fell behind what the hub keeps: say so, and go on from the newest."""
        self.notices.append(
            FeedNotice(
                code=NoticeCode.EVENTS_LOST,
                message=f"this stream fell more than {self.hub.keep} events behind: events "
                f"after {self.after} were not sent; reload what you show, then go on",
                after=self.after,
                resync=True,
            )
        )
        self.after = self.hub.end

    def _outage(self, problem: str | None) -> None:
        """Say once when the store stops answering, and once when it answers again."""
        if problem is not None and not self.down:
            self.down = True
            message = f"the server cannot read changes now (it retries): {problem}"
            self.notices.append(FeedNotice(code=NoticeCode.UNAVAILABLE, message=message))
        elif problem is None and self.down:
            self.down = False
            message = "the server reads changes again; none was lost"
            self.notices.append(FeedNotice(code=NoticeCode.AVAILABLE, message=message))

    @staticmethod
    def _notice(notice: FeedNotice) -> ServerSentEvent:
        return ServerSentEvent(event="notice", data=notice)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.leave(self.who.caller.user)
