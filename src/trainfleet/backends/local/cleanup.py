"""A few threads that run what they are given in turn (``Cleanup``)."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

IDLE_SECONDS = 5.0
"""How long a thread waits with nothing to run before it ends."""
log = logging.getLogger("trainfleet.backends.local")


class Cleanup:
    """At most ``threads`` threads that run the functions submitted, in the order given
    (two at once may end in either order). A thread ends when it has had nothing to run for
    IDLE_SECONDS, or at ``close``; the next ``submit`` starts one again."""

    def __init__(self, threads: int = 2, name: str = "cleanup") -> None:
        self.most = threads
        self.name = name
        self._queue: deque[Callable[[], None]] = deque()
        self._changed = threading.Condition()
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._closing = False

    def submit(self, run: Callable[[], None]) -> None:
        with self._changed:
            self._closing = False
            self._queue.append(run)
            if len(self._queue) > self._idle and len(self._threads) < self.most:
                thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._threads.add(thread)
                thread.start()
            else:
                self._changed.notify()

    @property
    def threads(self) -> int:
        """How many threads there are now."""
        with self._changed:
            return len(self._threads)

    def close(self, timeout: float) -> None:
        """Let the threads run what is queued, then end; wait up to ``timeout`` seconds
        for each."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def _work(self) -> None:
        me = threading.current_thread()
        with self._changed:
            while True:
                if not self._queue and not self._closing:
                    self._idle += 1
                    self._changed.wait(IDLE_SECONDS)
                    self._idle -= 1
                if not self._queue:
                    self._threads.discard(me)
                    return
                run = self._queue.popleft()
                self._changed.release()
                try:
                    run()
                except Exception:
                    log.exception("a task's cleanup failed")
                finally:
                    self._changed.acquire()
