"""Following with Server-Sent Events: poll a feed on a worker thread until it is done.

FastAPI's EventSourceResponse writes the wire format and the keep-alive comments; each
message's data is JSON, so log text with ``\\r`` or ``\\n`` in it (progress bars) survives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

import anyio
from fastapi.sse import ServerSentEvent

from trainfleet.control.access import Action
from trainfleet.server.auth import Principal, principal_of
from trainfleet.store.database import Store


class Feed(Protocol):
    """What a stream follows: ``poll`` returns the messages ready and whether it is done."""

    def poll(self) -> tuple[list[ServerSentEvent], bool]: ...

    def close(self) -> None: ...


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


def still_allowed(store: Store, who: Principal, team: str) -> Callable[[], bool]:
    """Whether ``who``'s token still holds, its user is enabled and still sees ``team``'s
    jobs, asked of the store itself."""

    def holds() -> bool:
        now = principal_of(store, who.token.digest)
        return now is not None and now.caller.sees(Action.READ_JOB, team)

    return holds


async def follow(
    feed: Feed, interval: float, allowed: Callable[[], bool] = _always
) -> AsyncIterator[ServerSentEvent]:
    """Poll ``feed`` every ``interval`` seconds (longer while many streams are open, see
    ``paced``) until it is done (or the client goes away).

    ``allowed`` (run on a worker thread about every RECHECK_SECONDS) returning False ends
    the stream at once, with no ``end`` message: a client that reconnects gets its 401.
    """
    checked = anyio.current_time()
    _Streams.open += 1
    try:
        while True:
            if anyio.current_time() - checked >= RECHECK_SECONDS:
                checked = anyio.current_time()
                if not await anyio.to_thread.run_sync(allowed):
                    return
            messages, done = await anyio.to_thread.run_sync(feed.poll)
            for item in messages:
                yield item
            if done:
                return
            await anyio.sleep(paced(interval))
    finally:
        _Streams.open -= 1
        feed.close()
