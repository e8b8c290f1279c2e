"""Tasks' logs, copied from the cluster's pod log API into the data directory while their
containers run, so that they outlive their Pods: all of a backend's copies on one thread's
event loop, over HTTP/2 connections shared by many streams (threads do not grow with tasks).

Lines are asked for with the kubelet's timestamps, which are dropped as they are written
and remembered (``<record>.logged``): a copy that starts again (the API went away, or a
restarted server adopts the task) asks for the lines since then and skips those written.
Secret values are masked as the local shim masks them (``supervision.masking``). A write
that finds the disk full leaves the log as it was, and its lines are asked for again,
every ``FULL_SECONDS``, until they fit: none is lost or written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import errno
import importlib.util
import logging
import os
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
from trainfleet.backends.supervision.shim import write_atomically

log = logging.getLogger("trainfleet.kubernetes")
RETRY_SECONDS = 0.3
FULL_SECONDS = 2.0
"""How long a copy waits before it tries again where the disk was full."""
QUIET_SECONDS = 300
"""How long a stream may stay silent before it is asked for again (a task may be quiet
that long; a connection that died silently is found out then)."""
CONNECTIONS = 64
"""Connections to the API at most; each carries up to the server's stream limit (250 by
default), and a stream past them all waits for one to end."""
CLOSE_SECONDS = 5.0
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
        self.done = threading.Event()

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
        if not written:
            return
        masker = copy.copy(self.masker)  # what it holds back stays as it was on a failure
        _append(out, masker.feed(written))
        self.masker, self.last = masker, last
        with contextlib.suppress(OSError):  # only a later copy's start depends on it
            _write_stamp(self.logged, last)


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
                        if not await self._copy_once(copied, out):
                            return
                        if finished and not copied.full:
                            return
                        await asyncio.sleep(FULL_SECONDS if copied.full else RETRY_SECONDS)
                finally:
                    with contextlib.suppress(OSError):
                        _append(out, copied.masker.flush())
        except OSError:
            pass  # no folder for the log: nothing can be copied
        finally:
            self._running.discard(running)
            copied.done.set()

    async def _copy_once(self, copied: LogCopy, out: BinaryIO) -> bool:
        """One read of the log stream to its end; False where there is nothing more to
        copy ever (the Pod is gone)."""
        assert self._client is not None
        params: dict[str, Any] = {"container": "task", "follow": "true", "timestamps": "true"}
        if copied.last is not None:
            params["sinceSeconds"] = max(1, int(time.time() - copied.last[0].timestamp()) + 2)
        url = f"/api/v1/namespaces/{self.connection.namespace}/pods/{copied.pod}/log"
        copied.full = False
        try:
            async with self._client.stream(
                "GET", url, params=params, headers=_authorization(self.connection)
            ) as response:
                if response.status_code != 200:  # not started yet (400), or gone (404)
                    return response.status_code != 404
                held = b""
                async for chunk in response.aiter_raw():
                    held += chunk
                    *lines, held = held.split(b"\n")
                    copied.write(lines, out)
                if held:
                    copied.write([held], out, end=b"")
        except OSError as error:  # a full disk
            copied.full = _out_of_room(error)
        except Exception:  # the API is away, or the stream broke: read again from the last line
            pass
        return True


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
    return httpx.AsyncClient(
        base_url=settings.host,
        verify=verify,
        http2=http2,
        trust_env=False,
        proxy=settings.proxy or None,
        limits=httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=4),
        timeout=httpx.Timeout(connection.config.request_timeout, read=QUIET_SECONDS, pool=None),
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
    try:
        return stamp(path.read_bytes().strip())
    except OSError:
        return None


def _write_stamp(path: Path, last: Stamp | None) -> None:
    if last is None:
        return
    second, nanos = last
    text = f"{second.strftime('%Y-%m-%dT%H:%M:%S')}.{nanos:09d}Z"
    write_atomically(str(path), text, durable=False)  # at worst, a line copied twice
