"""Readiness: whether the server can serve now (it has started, its store answers), checked
cheaply.

``/healthz`` says the process answers (liveness); ``/readyz`` says whether requests can be
served: a load balancer stops sending work while it is 503. One check runs at a time, on a
thread of its own (never behind requests that wait for the store), bounded by ``WAIT``
seconds, and its answer is reused for ``FRESH`` seconds. A check that outlasts twice ``WAIT``
(a database that hangs holds it until the store's watchdog cuts the link) answers "not
ready" meanwhile, and the next ones wait on that same check instead of queueing more.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

WAIT = 1.0
"""Seconds one check waits for the store."""
FRESH = 1.0
"""Seconds an answer is reused before the store is asked again."""


class Readiness:
    """Asks ``check`` (given the seconds to wait: why the store cannot answer, or None)
    at most once per ``FRESH`` seconds; ``starting`` (why the server has not started yet,
    or None), first, every time."""

    def __init__(
        self,
        check: Callable[[float], str | None],
        starting: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._check_store = check
        self._starting = starting
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="readyz")
        self._lock = asyncio.Lock()
        self._checked_at = -FRESH
        self._problem: str | None = None
        self._running: asyncio.Future[str | None] | None = None

    async def problem(self) -> str | None:
        """Why the server is not ready, or None when it is."""
        if (starting := self._starting()) is not None:
            return starting
        async with self._lock:
            if time.monotonic() - self._checked_at >= FRESH:
                if self._running is None or self._running.done():
                    loop = asyncio.get_running_loop()
                    self._running = loop.run_in_executor(self._executor, self._check)
                try:  # (not ``wait_for``: on Python 3.11 it can lose a cancellation)
                    async with asyncio.timeout(2 * WAIT):
                        self._problem = await asyncio.shield(self._running)
                except TimeoutError:
                    self._problem = f"the store did not answer in {2 * WAIT:.0f} s"
                self._checked_at = time.monotonic()
            return self._problem

    def _check(self) -> str | None:
        return self._check_store(WAIT)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
