"""Tasks' logs, copied from the cluster's pod log API into the data directory while their
containers run, so that they outlive their Pods: all of a backend's copies on one thread's
event loop, over HTTP/2 connections shared by many streams (threads do not grow with tasks).

Lines are asked for with the kubelet's timestamps, which are dropped as they are written
and remembered (``<record>.logged``): a copy that starts again (the API went away, or a
restarted server adopts the task) asks for the lines since then and skips those written.
Secret values are masked as the local shim masks them (``supervision.masking``). A write
that finds the disk full leaves the log as it was, and its lines are asked for again,
every ``FULL_SECONDS``, until they fit: none is lost or written twice.

Every stream is read to its end, even where its lines cannot be written (they are asked
for again): httpx resets no HTTP/2 stream given up, and what the API goes on sending on it
would hold the shared connection's flow-control window for good. So a followed stream
asks for at most ``FOLLOW_BYTES`` (the API ends it there, and it is followed again from its
last line), and no stream has a read timeout: TCP keepalives find a connection that died.

The API sends a followed log a line at a time, each in a frame of its own, and on this
loop a frame costs far more than a line (on a 2-core machine: about 3,000 lines a second
copied followed, against 23,000 read whole; ``benchmarks/kubernetes_logs.py``). So a log
whose followed stream brings more than ``CHATTY_LINES`` lines a second is read whole since
its last line instead, once every ``TURN_SECONDS`` at most, until a turn finds it calm
again: a Pod that floods its log neither falls ever further behind nor holds back the
others' lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import importlib.util
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from trainfleet.backends.kubernetes.connection import Connection
from trainfleet.backends.supervision.masking import Masker

log = logging.getLogger("trainfleet.kubernetes")
RETRY_SECONDS = 0.3
FULL_SECONDS = 2.0
"""How long a copy waits before it tries again where the disk was full."""
FOLLOW_BYTES = 64 << 10
"""Bytes a followed stream asks for at most (``limitBytes``): about a thousand lines."""
KEEPALIVE = {"TCP_KEEPIDLE": 60, "TCP_KEEPINTVL": 10, "TCP_KEEPCNT": 6}
"""A connection silent for a minute is probed, and given up after six unanswered probes
(each option where the system has it: Linux has all three)."""
CONNECTIONS = 64
"""Connections to the API at most; each carries up to the server's stream limit (250 by
default), and a stream past them all waits for one to end."""
CLOSE_SECONDS = 5.0
STAMP_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""How the file that keeps the last line's stamp is opened: never through a link, and
never waiting on a pipe that stands in its place."""
STAMP_BYTES = 64
"""More than a stamp takes."""
CHATTY_LINES = 1000
"""Lines a second past which a log is read in turns rather than followed."""
TURN_SECONDS = 1.0
"""How often a chatty log is read, at most."""
Stamp = tuple[datetime, int]
"""A kubelet timestamp: the second, and the nanoseconds within it."""


def stamp(text: bytes) -> Stamp | None:
    """``2026-11-27T11:00:00.12345Z`` as (second, nanoseconds); None where it is not one."""
    try:
        whole, _, fraction = text.decode().rstrip("Z").partition(".")
        second = datetime.fromisoformat(whole).replace(tzinfo=UTC)
        return second, int(fraction.ljust(9, "0")[:9] or 0)
    except ValueError:
        return None


class LogCopy:
    """The copy of the log of the container of Pod ``pod`` into ``path``, until ``ended()``
    says its container has ended and the stream has said all it had."""

    def __init__(
        self,
        pod: str,
        path: Path,
        mask: tuple[bytes, ...],
        record: Path,
        ended: Callable[[], bool],
    ) -> None:
        self.pod = pod
        self.path = path
        self.masker = Masker(mask)
        self.logged = record.with_name(record.name + ".logged")
        self.ended = ended
        self.last: Stamp | None = _read_stamp(self.logged)
        self.full = False
        """The last write found the disk full."""
        self.chatty = False
        """The log brings more lines than a followed stream should carry: read in turns."""
        self.cut = False
        """The last read ended at its ``FOLLOW_BYTES``, not at the log's end."""
        self.done = threading.Event()
        self._stamp_file: int | None = None

    def wait(self, seconds: float) -> bool:
        """Whether the copy has finished within ``seconds``."""
        return self.done.wait(seconds)

    def write(self, lines: list[bytes], out: BinaryIO, end: bytes = b"\n") -> None:
        """Append ``lines`` not written yet, whole or not at all (a full disk: OSError, and
        they are written by a later read)."""
        last, written = self.last, b""
        for line in lines:
            text, _, rest = line.partition(b" ")
            when = stamp(text)
            if when is None or (last is not None and when <= last):
                continue  # written already, or the API's words (a container removed)
            last = when
            written += rest + end
        if last is None or not written:
            return
        masker = copy.copy(self.masker)  # what it holds back stays as it was on a failure
        _append(out, masker.feed(written))
        self.masker, self.last = masker, last
        with contextlib.suppress(OSError):  # only a later copy's start depends on it
            self._keep_stamp(last)

    def _keep_stamp(self, last: Stamp) -> None:
        """Remember ``last`` in ``logged``, written over in place: a chunk costs one write
        where a new file each time (``write_atomically``) would cost more than the chunk.
        A write of a few bytes is whole or not made at all when this process is killed;
        at worst, a line is copied twice."""
        text, opened = _stamp_text(last), self._stamp_file is None
        if self._stamp_file is None:
            self._stamp_file = os.open(self.logged, os.O_WRONLY | os.O_CREAT | STAMP_FLAGS, 0o600)
        os.pwrite(self._stamp_file, text, 0)
        if opened:  # every stamp is as long: only one left by an earlier copy may be longer
            os.ftruncate(self._stamp_file, len(text))

    def close(self) -> None:
        """Let go of the file that remembers the last line."""
        if self._stamp_file is not None:
            os.close(self._stamp_file)
            self._stamp_file = None


class LogCopies:
    """The log copies of one backend's tasks, each a coroutine on one event loop (its
    thread made at the first copy), each reading a stream that follows its container."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: httpx.AsyncClient | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._closing = False

    def start(self, copied: LogCopy) -> LogCopy:
        """Begin ``copied``, which says when it has finished."""
        with self._lock:
            if self._closing:
                copied.done.set()
                return copied
            loop = self._loop or self._begin()
        asyncio.run_coroutine_threadsafe(self._run(copied), loop)
        return copied

    def close(self) -> None:
        """Stop every copy now (this process ends); their tasks run on, for a later process
        to adopt, whose copies go on from the lines these wrote."""
        with self._lock:
            closed, self._closing = self._closing, True
            loop, thread = self._loop, self._thread
        if closed or loop is None or thread is None:
            return
        finishing = asyncio.run_coroutine_threadsafe(self._finish(), loop)
        with contextlib.suppress(Exception):
            finishing.result(CLOSE_SECONDS)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)

    def _begin(self) -> asyncio.AbstractEventLoop:
        self._client = _client(self.connection)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(self._loop,), name="kubernetes logs", daemon=True
        )
        self._thread.start()
        return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()
        loop.close()

    async def _finish(self) -> None:
        for running in self._running:
            running.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    async def _run(self, copied: LogCopy) -> None:
        running = asyncio.current_task()
        assert running is not None
        self._running.add(running)
        try:
            copied.path.parent.mkdir(parents=True, exist_ok=True)
            with copied.path.open("ab", buffering=0) as out:
                try:
                    while True:
                        finished = copied.ended()  # before the read: what it reads is whole
                        began = time.monotonic()
                        if not await self._copy_once(copied, out):
                            return
                        if finished and not copied.full and not copied.cut:
                            return
                        turn = began + TURN_SECONDS - time.monotonic()  # a read a turn at most
                        pause = max(0.0, turn) if copied.chatty else RETRY_SECONDS
                        await asyncio.sleep(FULL_SECONDS if copied.full else pause)
                finally:
                    with contextlib.suppress(OSError):
                        _append(out, copied.masker.flush())
        except OSError:
            pass  # no folder for the log: nothing can be copied
        finally:
            copied.close()
            self._running.discard(running)
            copied.done.set()

    async def _copy_once(self, copied: LogCopy, out: BinaryIO) -> bool:
        """One read of the log to its end: followed for ``FOLLOW_BYTES`` at most, or where
        it is chatty, whole as it is now. False where there is nothing more to copy ever
        (the Pod is gone)."""
        assert self._client is not None
        follow = not copied.chatty
        params: dict[str, Any] = {"container": "task", "timestamps": "true"}
        if follow:
            params.update(follow="true", limitBytes=FOLLOW_BYTES)
        if copied.last is not None:  # the node's own clock, as the lines' stamps
            params["sinceTime"] = copied.last[0].strftime("%Y-%m-%dT%H:%M:%SZ")
        url = f"/api/v1/namespaces/{self.connection.namespace}/pods/{copied.pod}/log"
        copied.full = copied.cut = False
        began, brought, received, last = time.monotonic(), 0, 0, copied.last
        try:
            async with self._client.stream(
                "GET", url, params=params, headers=_authorization(self.connection)
            ) as response:
                if response.status_code != 200:  # not started yet (400), or gone (404)
                    await response.aread()
                    return response.status_code != 404
                held = b""
                async for chunk in response.aiter_raw():
                    received += len(chunk)
                    held += chunk
                    *lines, held = held.split(b"\n")
                    brought += len(lines)
                    _write(copied, lines, out)
                    # A stream that always has data would keep the loop from the others'.
                    await asyncio.sleep(0)
                copied.cut = follow and received >= FOLLOW_BYTES
                if held and not copied.cut:  # the last line, unfinished: a cut one comes again
                    _write(copied, [held], out, end=b"")
        except Exception:  # the API is away, or the stream broke: read again from the last line
            pass
        if follow:  # a stream cut short that brought nothing new: the dense second it began in
            seconds = time.monotonic() - began
            copied.chatty = copied.cut and (copied.last == last or _chatty(brought, seconds))
        else:
            copied.chatty = _chatty(brought, TURN_SECONDS)
        return True


def _write(copied: LogCopy, lines: list[bytes], out: BinaryIO, end: bytes = b"\n") -> None:
    """``copied.write``, but on a full disk note it and write nothing more of this read
    (its lines are asked for again)."""
    if copied.full:
        return
    try:
        copied.write(lines, out, end)
    except OSError as error:
        if not _out_of_room(error):
            raise
        copied.full = True


def _chatty(lines: int, seconds: float) -> bool:
    """Whether ``lines`` read in ``seconds`` are more than a followed stream should carry."""
    return lines > CHATTY_LINES * seconds


def _client(connection: Connection) -> httpx.AsyncClient:
    """An HTTP/2 client of the cluster's API (HTTP/1.1 where ``h2``, of the ``kubernetes``
    extra, is missing), with the kubeconfig's address, authority and credentials; no proxy
    but the kubeconfig's own."""
    settings = connection.core.api_client.configuration
    http2 = importlib.util.find_spec("h2") is not None
    if not http2:
        log.warning(
            "h2 is not installed (pip install 'trainfleet[kubernetes]'): each log copied "
            "takes a connection of its own, %d at most at once",
            CONNECTIONS,
        )
    verify: ssl.SSLContext | bool = False
    if settings.verify_ssl:
        verify = ssl.create_default_context(cafile=settings.ssl_ca_cert)
        if settings.cert_file:
            verify.load_cert_chain(settings.cert_file, settings.key_file)
    keepalive = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    keepalive += [
        (socket.IPPROTO_TCP, getattr(socket, name), value)
        for name, value in KEEPALIVE.items()
        if hasattr(socket, name)
    ]
    transport = httpx.AsyncHTTPTransport(
        verify=verify,
        http2=http2,
        trust_env=False,
        proxy=settings.proxy or None,
        limits=httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=4),
        socket_options=keepalive,
    )
    return httpx.AsyncClient(
        base_url=settings.host,
        transport=transport,
        trust_env=False,
        timeout=httpx.Timeout(connection.config.request_timeout, read=None, pool=None),
    )


def _authorization(connection: Connection) -> dict[str, str]:
    """The bearer token's header, asked for at each stream (a kubeconfig's exec plugin
    may give a new one)."""
    token = connection.core.api_client.configuration.get_api_key_with_prefix("authorization")
    return {"authorization": token} if token else {}


def _append(out: BinaryIO, data: bytes) -> None:
    """Append all of ``data`` to ``out`` (unbuffered), or none of it: a write the disk
    cut short is taken back before the error goes on."""
    start = os.fstat(out.fileno()).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[out.write(view) or 0 :]
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(out.fileno(), start)
        raise


def _out_of_room(error: OSError) -> bool:
    return error.errno in (errno.ENOSPC, errno.EDQUOT)


def _read_stamp(path: Path) -> Stamp | None:
    """The stamp kept in ``path``: None where there is none, or where something else than
    a file stands there (a link is not followed, a pipe not waited on)."""
    try:
        opened = os.open(path, os.O_RDONLY | STAMP_FLAGS)
        with os.fdopen(opened, "rb") as kept:
            return stamp(kept.read(STAMP_BYTES).strip())
    except OSError:
        return None


def _stamp_text(last: Stamp) -> bytes:
    """``last`` as ``stamp`` reads it, always as long (nanoseconds in nine digits)."""
    second, nanos = last
    return f"{second.strftime('%Y-%m-%dT%H:%M:%S')}.{nanos:09d}Z\n".encode()
