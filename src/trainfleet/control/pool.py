"""A few threads for every job's controller: a pool that runs each key's work in order and
one at a time, and one clock for every key's timers (``control.runner``).

A key's work is its queue of callables; a key is on a lane's ready queue at most once, so
no two of its callables ever run together, whatever the number of workers. A lane's
threads start as work comes, up to its size, and wait for more once started.

Only one of a lane's threads runs a callable at a time (it has the lane's turn) while the
callables are quick, as nearly all are: Python threads that run together only fight for
the interpreter's lock, and a burst of starts took a third more CPU so. A callable that
runs past ``STUCK`` (it builds an environment, waits on sbatch or on a database that is
away) gives its turn up to the next thread, so a slow one never holds the others up.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

from trainfleet.store.connection import patiently

log = logging.getLogger("trainfleet.control")

BATCH = 32
"""Callables of one key run in a row before the other keys waiting get their turn."""

STUCK = 0.1
"""Seconds after which a lane's running callable gives its turn up to the next thread."""


class _Turns:
    """One turn to run callables, held by one thread at a time as long as it finds work.
    A holder whose callable runs past ``STUCK`` loses the turn to a thread that waits for
    it (and finishes that callable all the same); one that has kept it while another
    thread waited past ``STUCK`` hands it on before its next callable."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._holder: int | None = None
        self._since = 0.0
        """When the holder's callable began."""
        self._waiting: dict[int, float] = {}
        """The threads that wait for the turn (each with a key to serve), since when."""

    def take(self) -> None:
        me = threading.get_ident()
        with self._changed:
            self._waiting[me] = time.monotonic()
            while self._holder is not None and time.monotonic() - self._since < STUCK:
                self._changed.wait(STUCK)
            del self._waiting[me]
            self._holder, self._since = me, time.monotonic()

    def keep(self) -> None:
        """Before each callable: keep the turn, or take it (again) where it is not held."""
        with self._changed:
            now = time.monotonic()
            if self._holder == threading.get_ident() and all(
                now - since < STUCK for since in self._waiting.values()
            ):
                self._since = now
                return
        self.give()  # where it has it, another has waited long enough: its turn
        self.take()

    def give(self) -> None:
        with self._changed:
            if self._holder == threading.get_ident():
                self._holder = None
                self._changed.notify()


class _Lane:
    """Threads, up to ``size``, that serve the keys put on one ready queue."""

    def __init__(
        self, name: str, size: int, slow: bool, serve: Callable[[Hashable, bool], None]
    ) -> None:
        self._name, self._size, self.slow, self._serve = name, size, slow, serve
        self._ready: queue.SimpleQueue[Hashable] = queue.SimpleQueue()
        self._turns = _Turns()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def put(self, key: Hashable) -> None:
        self._ready.put(key)
        with self._lock:
            if self._idle > 0 or self._threads >= self._size:
                return
            self._threads += 1
            number = self._threads
        thread = threading.Thread(target=self._work, name=f"{self._name}-{number}", daemon=True)
        thread.start()

    def _work(self) -> None:
        # Store calls wait an outage out: what a controller does can wait, its tasks run on.
        with patiently():
            while True:
                try:
                    key = self._ready.get_nowait()
                except queue.Empty:  # idle, with no turn: another thread may take it
                    self._turns.give()
                    with self._lock:
                        self._idle += 1
                    key = self._ready.get()
                    with self._lock:
                        self._idle -= 1
                self._turns.keep()
                self._serve(key, self.slow)


class KeyedPool:
    """Runs callables on at most ``workers`` threads, those of one key in the order they were
    submitted and never two at once. A callable submitted ``slow`` (a job's start, which may
    build an environment or wait on a cluster engine) runs on one of ``slow_workers`` other
    threads, its key held meanwhile, so that it never takes a thread the others need."""

    def __init__(self, name: str, workers: int, slow_workers: int) -> None:
        self._lanes = {
            False: _Lane(name, workers, False, self._serve),
            True: _Lane(f"{name}-slow", slow_workers, True, self._serve),
        }
        self._work: dict[Hashable, deque[tuple[Callable[[], None], bool]]] = {}
        """Each key waiting or served, with what is left to run of it."""
        self._lock = threading.Lock()

    def submit(self, key: Hashable, call: Callable[[], None], slow: bool = False) -> None:
        """Run ``call`` after the key's callables submitted before it; exceptions are logged."""
        with self._lock:
            work = self._work.get(key)
            if work is not None:  # waiting or served now: it comes in its turn
                work.append((call, slow))
                return
            self._work[key] = deque([(call, slow)])
        self._lanes[slow].put(key)

    def _serve(self, key: Hashable, slow: bool) -> None:
        for _ in range(BATCH):
            with self._lock:
                work = self._work[key]
                if not work or work[0][1] is not slow:
                    break
                call, _ = work.popleft()
            try:
                call()
            except Exception:
                log.exception("a controller's step failed")
        with self._lock:
            work = self._work[key]
            if not work:
                del self._work[key]
                return
            lane = work[0][1]
        self._lanes[lane].put(key)  # behind the other keys waiting


class Clock:
    """One thread that calls each callable at its time (``time.monotonic``); the callables
    must be quick (they hand work to a pool)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def at(self, due: float, call: Callable[[], None]) -> None:
        with self._changed:
            heapq.heappush(self._due, (due, next(self._sequence), call))
            if self._due[0][2] is call:
                self._changed.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changed:
                now = time.monotonic()
                while not self._due or self._due[0][0] > now:
                    self._changed.wait(self._due[0][0] - now if self._due else None)
                    now = time.monotonic()
                due = []
                while self._due and self._due[0][0] <= now:
                    due.append(heapq.heappop(self._due)[2])
            for call in due:
                try:
                    call()
                except Exception:
                    log.exception("a timer failed")
