"""Streams poll less often the more are open, so followers never crowd out other requests
(``benchmarks/api.py --followers 400``: a log-range read 6.7 ms p50 with 400 followers,
22.5 s when each polled ten times a second)."""

from __future__ import annotations

import anyio
from fastapi.sse import ServerSentEvent

from trainfleet.server import sse


class CountingFeed:
    """A feed that is done after ``polls`` polls, noting how many streams were open."""

    def __init__(self, polls: int) -> None:
        self.left = polls
        self.seen_open: list[int] = []
        self.closed = False

    def poll(self) -> sse.Poll:
        self.seen_open.append(sse._Streams.open)
        self.left -= 1
        return sse.Poll([ServerSentEvent(data="x")], done=self.left == 0)

    def close(self) -> None:
        self.closed = True


def test_the_pause_grows_with_the_streams_open_up_to_a_second() -> None:
    interval = 0.1
    for open_now, pause in ((0, 0.1), (sse.FULL_RATE_STREAMS, 0.1), (400, 0.8), (5000, 1.0)):
        sse._Streams.open = open_now
        try:
            assert sse.paced(interval) == pause
        finally:
            sse._Streams.open = 0


def test_open_streams_are_counted_while_they_last() -> None:
    feeds = [CountingFeed(3) for _ in range(5)]

    async def main() -> None:
        async def drain(feed: CountingFeed) -> None:
            async for _ in sse.follow(feed, 0.001):
                pass

        async with anyio.create_task_group() as group:
            for feed in feeds:
                group.start_soon(drain, feed)

    anyio.run(main)
    assert all(feed.closed for feed in feeds)
    assert max(max(feed.seen_open) for feed in feeds) == 5
    assert sse._Streams.open == 0
