"""The engine's door across processes: calls made in one process (a server's API) and run
in another (its engine's), answered as futures.

Why two processes: a burst of submissions keeps the API's event loop busy, and a thread of
the same interpreter that writes the store waits for it while it holds SQLite's one write
lock; the engine's own writes then wait behind that one. With the API in a process of its
own and every write made by the engine's process, a burst of 10,000 ran in 56 s against
84 s (a prototype; README "At scale").

Both ends are this program's own processes, joined by a socket pair made before the API's
process was started (no address, no listener): what crosses is pickled. Only the methods
named when the door is opened can be called.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import pickle
import socket
import struct
import threading
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from trainfleet.domain.errors import Unavailable

MOST_IN_FLIGHT = 4096
"""Calls one client may have unanswered at once; the next is refused (DoorBusy)."""
WORKERS = 4
"""Threads that run calls in the engine's process (a call that returns a future holds
none while it waits)."""
NUMBER = struct.Struct("!Q")
"""Each message begins with its call's number: an answer that cannot be read is still
told to the call it answers."""


class DoorClosed(Unavailable):
    """The other process is gone (or the door was closed): the call was not answered
    (a request that needed it is answered 503: another process serves it soon)."""


class DoorBusy(Unavailable):
    """Too many calls are unanswered: try again shortly (503)."""


class Unanswerable(Exception):
    """What a call raised or returned could not be sent back (it cannot be pickled)."""


class DoorServer:
    """Runs the calls that arrive on ``conn`` with the methods of ``target`` named in
    ``allowed``, on ``workers`` threads; a call whose method returns a Future is answered
    when that is done, without holding a thread meanwhile."""

    def __init__(
        self, conn: Connection, target: object, allowed: Collection[str], workers: int = WORKERS
    ) -> None:
        self.conn = conn
        self.target = target
        self.allowed = frozenset(allowed)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="door")
        self._send_lock = threading.Lock()

    def serve(self) -> None:
        """Answer calls until the other end closes; then return."""
        try:
            while True:
                try:
                    number, payload = _split(self.conn.recv_bytes())
                except (EOFError, OSError):
                    return
                try:
                    name, args, kwargs = pickle.loads(payload)
                except Exception as error:
                    self._answer(number, None, Unanswerable(f"the call cannot be read: {error}"))
                    continue
                if name not in self.allowed:
                    self._answer(number, None, AttributeError(f"the door has no call {name!r}"))
                    continue
                method = operator.attrgetter(name)(self.target)  # dotted: ``store.add_job``
                self._pool.submit(self._run, number, method, args, kwargs)
        finally:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self.conn.close()

    def _run(self, number: int, method: Callable[..., Any], args: Any, kwargs: Any) -> None:
        try:
            result = method(*args, **kwargs)
        except Exception as error:
            self._answer(number, None, error)
            return
        if isinstance(result, Future):
            result.add_done_callback(lambda done: self._answer_future(number, done))
        else:
            self._answer(number, result, None)

    def _answer_future(self, number: int, done: Future[Any]) -> None:
        error = done.exception()
        self._answer(number, None if error else done.result(), error)

    def _answer(self, number: int, result: Any, error: BaseException | None) -> None:
        try:
            payload = pickle.dumps((result, error))
        except Exception as unpicklable:
            why = Unanswerable(f"{type(error or result).__name__}: {unpicklable}")
            payload = pickle.dumps((None, why))
        try:
            with self._send_lock:
                self.conn.send_bytes(NUMBER.pack(number) + payload)
        except (EOFError, OSError):
            pass  # the caller is gone: nobody waits for this answer


class DoorClient:
    """Calls to the process behind ``conn``: ``call(name, *args, **kwargs)`` is a future
    of what the method returned (or raised there). Every unanswered call fails with
    DoorClosed once that process is gone."""

    def __init__(self, conn: Connection, most_in_flight: int = MOST_IN_FLIGHT) -> None:
        self.conn = conn
        self.most_in_flight = most_in_flight
        self._waiting: dict[int, Future[Any]] = {}
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._closed: str | None = None
        self.gone = threading.Event()
        """Set once the other process is gone, or this end was closed."""
        self._receiver = threading.Thread(target=self._receive, name="door-answers", daemon=True)
        self._receiver.start()

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Send the call now (it never waits for the answer); DoorBusy where too many are
        unanswered, DoorClosed once the other process is gone."""
        payload = pickle.dumps((name, args, kwargs))  # what cannot be sent raises here
        answer: Future[Any] = Future()
        with self._lock:
            if self._closed is not None:
                raise DoorClosed(self._closed)
            if len(self._waiting) >= self.most_in_flight:
                raise DoorBusy(f"{len(self._waiting)} calls to the engine are unanswered")
            number = next(self._numbers)
            self._waiting[number] = answer
            try:
                self.conn.send_bytes(NUMBER.pack(number) + payload)
            except (EOFError, OSError) as error:
                del self._waiting[number]
                raise DoorClosed(f"the engine's process is gone: {error}") from None
        return answer

    def close(self) -> None:
        """Close this end: the other process sees the door closed; unanswered calls fail.
        (The socket is shut down, not closed: a close leaves another thread's read
        blocked, and the other end open; that thread closes it.)"""
        self._fail_all("the door was closed")
        with contextlib.suppress(OSError):
            _shut(self.conn)

    def _receive(self) -> None:
        while True:
            try:
                number, payload = _split(self.conn.recv_bytes())
            except (EOFError, OSError):
                self._fail_all("the engine's process is gone")
                self.conn.close()
                return
            with self._lock:
                answer = self._waiting.pop(number, None)
            if answer is None:
                continue
            try:
                result, error = pickle.loads(payload)
            except Exception as unreadable:  # an exception class that does not load again
                result, error = None, Unanswerable(f"the answer cannot be read: {unreadable}")
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(result)

    def _fail_all(self, why: str) -> None:
        with self._lock:
            self._closed = self._closed or why
            waiting, self._waiting = self._waiting, {}
        self.gone.set()
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(DoorClosed(why))


class Forwarded:
    """An object of the other process (``prefix``, a dotted name the door answers): each
    method called here runs there and returns what it returned, or its future if not
    ``wait``."""

    def __init__(self, door: DoorClient, prefix: str, wait: bool = True) -> None:
        self._door = door
        self._prefix = prefix
        self._wait = wait

    def __getattr__(self, name: str) -> Callable[..., Any]:
        call = f"{self._prefix}.{name}"

        def forwarded(*args: Any, **kwargs: Any) -> Any:
            answer = self._door.call(call, *args, **kwargs)
            return answer.result() if self._wait else answer

        forwarded.__name__ = call
        return forwarded

    def close(self) -> None:
        """Ends nothing there: the other process closes its own."""


def _shut(conn: Connection) -> None:
    """Shut the socket under ``conn`` down both ways; its descriptor stays open for the
    thread that reads it, which closes it once it reads the end."""
    sock = socket.socket(fileno=conn.fileno())
    try:
        sock.shutdown(socket.SHUT_RDWR)
    finally:
        sock.detach()


def _split(message: bytes) -> tuple[int, bytes]:
    """A message's call number, and the rest."""
    return NUMBER.unpack_from(message)[0], message[NUMBER.size :]
