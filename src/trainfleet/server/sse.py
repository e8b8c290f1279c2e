"""Following with Server-Sent Events: poll a feed on a worker thread until it is done.

FastAPI's EventSourceResponse writes the wire format and the keep-alive comments; each
message's data is JSON, so log text with ``\\r`` or ``\\n`` in it (progress bars) survives.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import anyio
from fastapi.sse import ServerSentEvent


class Feed(Protocol):
    """What a stream follows: ``poll`` returns the messages ready and whether it is done."""

    def poll(self) -> tuple[list[ServerSentEvent], bool]: ...

    def close(self) -> None: ...


async def follow(feed: Feed, interval: float) -> AsyncIterator[ServerSentEvent]:
    """Poll ``feed`` every ``interval`` seconds until it is done (or the client goes away)."""
    try:
        while True:
            messages, done = await anyio.to_thread.run_sync(feed.poll)
            for item in messages:
                yield item
            if done:
                return
            await anyio.sleep(interval)
    finally:
        feed.close()
