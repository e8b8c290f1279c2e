"""Following with Server-Sent Events: poll a feed on a worker thread until it is done.

``EventStream`` writes the wire format (FastAPI's ``format_sse_event``); each message's data
is JSON, so log text with ``\\r`` or ``\\n`` in it (progress bars) survives. ``follow``
sends a keep-alive comment when a stream has been quiet for KEEPALIVE_SECONDS. (FastAPI's
own streaming of a generator endpoint inserts its keep-alives from a second task, which
logged an ERROR and a traceback whenever a client left while it was sending, and did not
close the generator: its feed stayed open.)
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from typing import NamedTuple, Protocol

import anyio
from fastapi.sse import ServerSentEvent, format_sse_event
from pydantic_core import to_json
from starlette.requests import ClientDisconnect
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from trainfleet.control.access import Action
from trainfleet.control.services.accounts import Accounts
from trainfleet.control.services.tokens import Principal

log = logging.getLogger(__name__)


class Poll(NamedTuple):
    """What one poll of a feed found."""

    messages: list[ServerSentEvent]
    done: bool = False
    """The stream ends after these messages."""
    more: bool = False
    """More is ready already: poll again once these are sent, without a pause."""


class Feed(Protocol):
    """What a stream follows: ``poll`` returns the messages ready, and what comes next."""

    def poll(self) -> Poll: ...

    def close(self) -> None: ...


KEEPALIVE_SECONDS = 15.0
"""Most seconds an open stream stays silent: then it sends a comment, which keeps proxies
from closing it and tells a client that the server is still there."""


RECHECK_SECONDS = 1.0
"""How often an open stream asks the store whether its caller may still read it: a stream
ends this soon after that changes (the requests' 2 s token cache is not trusted here)."""


FULL_RATE_STREAMS = 50
"""Open streams that all poll at the server's interval; with more, each polls less often, in
proportion, so that followers never crowd out other requests (they get their news a little
later instead)."""
SLOWEST_POLL = 1.0
"""Seconds between two polls of a stream, however many are open."""


class _Streams:
    """How many streams are open in this process."""

    open = 0


def paced(interval: float) -> float:
    """The pause between two polls of a stream now: ``interval``, longer with many open."""
    return min(SLOWEST_POLL, max(interval, interval * _Streams.open / FULL_RATE_STREAMS))


def _always() -> bool:
    return True


def still_allowed(accounts: Accounts, who: Principal, team: str) -> Callable[[], bool]:
    """Whether ``who``'s token still holds, its user is enabled and still sees ``team``'s
    jobs, asked of the store itself (no cache)."""
    return lambda: accounts.still_sees(who, Action.READ_JOB, team)


async def follow(
    feed: Feed, interval: float, allowed: Callable[[], bool] = _always
) -> AsyncGenerator[ServerSentEvent, None]:
    """Poll ``feed`` every ``interval`` seconds (longer while many streams are open, see
    ``paced``; at once while it has more ready) until it is done (or the client goes away).

    ``allowed`` (run on a worker thread about every RECHECK_SECONDS) returning False ends
    the stream at once, with no ``end`` message: a client that reconnects gets its 401.
    """
    checked = sent = anyio.current_time()
    _Streams.open += 1
    try:
        while True:
            if anyio.current_time() - checked >= RECHECK_SECONDS:
                checked = anyio.current_time()
                if not await anyio.to_thread.run_sync(allowed):
                    return
            poll = await anyio.to_thread.run_sync(feed.poll)
            for item in poll.messages:
                yield item  # returns once the client has taken it
            if poll.done:
                return
            if poll.messages:
                sent = anyio.current_time()
            elif anyio.current_time() - sent >= KEEPALIVE_SECONDS:
                sent = anyio.current_time()
                yield ServerSentEvent(comment="ping")
            if not poll.more:
                await anyio.sleep(paced(interval))
    finally:
        _Streams.open -= 1
        feed.close()


def encoded(event: ServerSentEvent) -> bytes:
    """One event in the wire format, its ``data`` as JSON."""
    data = event.raw_data
    if data is None and event.data is not None:
        data = to_json(event.data).decode()
    return format_sse_event(
        data_str=data, event=event.event, id=event.id, retry=event.retry, comment=event.comment
    )


STREAM_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {
        "content": {
            "text/event-stream": {
                "itemSchema": {
                    "type": "object",
                    "properties": {
                        "data": {"type": "string"},
                        "event": {"type": "string"},
                        "id": {"type": "string"},
                        "retry": {"type": "integer", "minimum": 0},
                    },
                }
            }
        },
    }
}
"""The OpenAPI description of an ``EventStream`` answer."""


class EventStream(StreamingResponse):
    """A ``text/event-stream`` answer of ``events``: each is written when the client has
    taken the one before; the generator is closed however the stream ends, and a client
    that goes away ends it quietly (a debug line)."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncGenerator[ServerSentEvent, None]) -> None:
        self.events = events
        self.chunks = self._encoded()
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        super().__init__(self.chunks, headers=headers)

    async def _encoded(self) -> AsyncGenerator[bytes, None]:
        async for event in self.events:
            yield encoded(event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except ClientDisconnect:  # ASGI 2.4 servers say so by raising; earlier ones don't
            log.debug("a client left the stream %s", scope.get("path"))
        finally:
            await self.chunks.aclose()
            await self.events.aclose()
