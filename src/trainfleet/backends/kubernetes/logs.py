"""A task's log, copied from the cluster's pod log API into the data directory while its
container runs, so that it outlives the Pod: one thread per running task.

Lines are asked for with the kubelet's timestamps, which are dropped as they are written
and remembered (``<record>.logged``): a copy that starts again (the API went away, or a
restarted server adopts the task) asks for the lines since then and skips those written.
Secret values are masked as the local shim masks them (``supervision.masking``). A write
that finds the disk full leaves the log as it was, and its lines are asked for again,
every ``FULL_SECONDS``, until they fit: none is lost or written twice.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from trainfleet.backends.kubernetes.connection import Connection, status_of
from trainfleet.backends.supervision.masking import Masker
from trainfleet.backends.supervision.shim import write_atomically

RETRY_SECONDS = 0.3
FULL_SECONDS = 2.0
"""How long a copy waits before it tries again where the disk was full."""
QUIET_SECONDS = 300
"""How long a stream may stay silent before it is asked for again (a task may be quiet
that long; a connection that died silently is found out then)."""
CHUNK = 65536
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
    """Copies the log of the container of Pod ``pod`` into ``path`` until ``ended()`` says
    its container has ended and the stream has said all it had."""

    def __init__(
        self,
        connection: Connection,
        pod: str,
        path: Path,
        mask: tuple[bytes, ...],
        record: Path,
        ended: Callable[[], bool],
    ) -> None:
        self.connection = connection
        self.pod = pod
        self.path = path
        self.masker = Masker(mask)
        self.logged = record.with_name(record.name + ".logged")
        self.ended = ended
        self.last: Stamp | None = _read_stamp(self.logged)
        self.full = False
        """The last write found the disk full."""
        self.done = threading.Event()
        self._closing = False
        self._response: Any = None
        self.thread = threading.Thread(target=self._run, name=f"log {pod}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def wait(self, seconds: float) -> bool:
        """Whether the copy has finished within ``seconds``."""
        return self.done.wait(seconds)

    def close(self) -> None:
        """Stop copying now (this process ends): a read in progress returns at once."""
        self._closing = True
        with contextlib.suppress(Exception):
            self._response.shutdown()

    def _run(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("ab", buffering=0) as out:
                while True:
                    finished = self.ended()  # before the read: what it reads is then whole
                    if not self._copy_once(out) or (finished and not self.full) or self._closing:
                        with contextlib.suppress(OSError):
                            _append(out, self.masker.flush())
                        return
                    time.sleep(FULL_SECONDS if self.full else RETRY_SECONDS)
        finally:
            self.done.set()

    def _copy_once(self, out: BinaryIO) -> bool:
        """One read of the log stream to its end; False where there is nothing more to
        copy ever (the Pod is gone)."""
        since = None
        if self.last is not None:
            since = max(1, int(time.time() - self.last[0].timestamp()) + 2)
        try:
            response = self.connection.call(
                f"log of pod {self.pod}",
                self.connection.core.read_namespaced_pod_log,
                self.pod,
                self.connection.namespace,
                container="task",
                follow=True,
                timestamps=True,
                since_seconds=since,
                _preload_content=False,
                _request_timeout=(self.connection.config.request_timeout, QUIET_SECONDS),
            )
        except OSError as error:  # not started yet (400), or the API is away
            return status_of(error) != 404
        self._response = response
        try:
            self.full = False
            self._copy(response, out)
        except OSError as error:  # a full disk, or the connection broke
            self.full = _out_of_room(error)
        except Exception:  # the connection broke: read again from the last line
            pass
        finally:
            with contextlib.suppress(Exception):
                response.release_conn()
        return True

    def _copy(self, response: Any, out: BinaryIO) -> None:
        held = b""
        while chunk := response.read1(CHUNK):
            held += chunk
            *lines, held = held.split(b"\n")
            self._write(lines, out)
        if held:
            self._write([held], out, end=b"")

    def _write(self, lines: list[bytes], out: BinaryIO, end: bytes = b"\n") -> None:
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
