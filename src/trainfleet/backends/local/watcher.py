"""One thread that learns how every local task ended (``ExitWatcher``).

Each task's shim is watched through a pidfd (``os.pidfd_open``), all of them in one
selector. A task whose pidfd cannot be had (a kernel without pidfds, or the descriptors
spent) is polled instead, every POLL_SECONDS. Once a shim has ended, and the rest of a
stopped task's group has had its grace, the task's ``ended`` runs on a cleanup thread
(``Cleanup``), so that one slow cleanup (a /proc scan, a container's removal) holds up no
other task's exit.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import selectors
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from trainfleet.backends.local.cleanup import Cleanup
from trainfleet.backends.local.groups import live_groups

POLL_SECONDS = 0.25
"""How often a task without a pidfd is asked whether it ended."""
DRAIN_SECONDS = 0.02
"""How often a stopped task's group is looked at until it is gone."""
IDLE_SECONDS = 5.0
"""How long the thread waits with nothing to watch before it ends (the next task starts it)."""
CLOSE_SECONDS = 10.0
"""How long ``close`` waits for the thread and for the cleanups queued."""
log = logging.getLogger("trainfleet.backends.local")


@dataclass(eq=False)
class Watch:
    """One task's shim, followed until it and (when stopped) its group are gone."""

    pid: int
    poll: Callable[[], int | None]
    """Its exit code once it has ended (a child is reaped), None while it runs."""
    lingers: Callable[[], bool]
    """Whether the rest of its group still has its grace (a task being stopped)."""
    ended: Callable[[int], None]
    """Run on a cleanup thread, once, with the exit code, when the task is over."""
    code: int | None = field(default=None, init=False)


class ExitWatcher:
    """One thread for the exits of every task ``watch``ed, and ``Cleanup`` threads that
    run their ``ended``.

    The thread starts with the first task and ends after IDLE_SECONDS with none. It holds
    at most half of this process's open-file limit in pidfds: the rest of the tasks are
    polled, and the server keeps descriptors for its connections and its database.
    """

    def __init__(self, name: str = "task-exits", cleanup_threads: int = 2) -> None:
        self.name = name
        self.cleanup = Cleanup(cleanup_threads, "task-cleanup")
        self._lock = threading.Lock()
        self._new: list[Watch] = []
        self._loop: _Loop | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    def watch(self, watch: Watch) -> None:
        """Follow ``watch`` from now on; its ``ended`` follows once."""
        with self._lock:
            self._new.append(watch)
            # A thread is gone without a word only in a child forked after it started.
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._loop = _Loop()
                self._thread = threading.Thread(
                    target=self._run, args=(self._loop,), name=self.name, daemon=True
                )
                self._thread.start()
            else:
                self._loop.wake()

    @property
    def thread(self) -> threading.Thread | None:
        """The watching thread, while there is one."""
        with self._lock:
            return self._thread

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """End the thread, then the cleanups queued. Tasks still running are left to run
        (a supervised one, for a later server to adopt): their exits are not reported."""
        with self._lock:
            self._closing = True
            thread, loop = self._thread, self._loop
            if loop is not None:
                loop.wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.cleanup.close(timeout)

    def _run(self, loop: _Loop) -> None:
        idle_since: float | None = None
        try:
            while True:
                with self._lock:
                    new, self._new = self._new, []
                    idle = not new and idle_since is not None and _past(idle_since, IDLE_SECONDS)
                    if self._closing or idle:
                        self._new = new  # come while closing: for the next thread
                        self._loop = self._thread = None
                        return
                try:
                    self._clean([watch for watch in new if not loop.add(watch)])
                    idle_since = None if loop.busy else (idle_since or time.monotonic())
                    self._clean(
                        loop.step(loop.timeout(None if idle_since is None else IDLE_SECONDS))
                    )
                except Exception:  # a bug: the other tasks are still watched
                    log.exception("the exit watcher failed a step")
                    time.sleep(POLL_SECONDS)
        finally:
            loop.close()

    def _clean(self, over: list[Watch]) -> None:
        """Have the cleanup threads run the ``ended`` of the tasks ``over``."""
        for watch in over:
            code = watch.code
            assert code is not None
            self.cleanup.submit(partial(watch.ended, code))


def _past(since: float, seconds: float) -> bool:
    return time.monotonic() - since >= seconds


class _Loop:
    """The watching thread's state: a selector of pidfds (and an eventfd that wakes it),
    the tasks polled, and the stopped ones whose groups drain."""

    def __init__(self) -> None:
        self.selector: selectors.BaseSelector | None = None
        self.eventfd: int | None = None
        self.woken = threading.Event()  # without a selector
        self.pidfds: dict[int, Watch] = {}
        self.polled: list[Watch] = []
        self.draining: list[Watch] = []
        self.next_poll = self.next_drain = 0.0
        self._wake_lock = threading.Lock()
        try:
            self.selector = selectors.DefaultSelector()
            self.eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self.selector.register(self.eventfd, selectors.EVENT_READ)
        except OSError as error:  # descriptors spent: every task is polled
            log.warning("exit watcher without a selector (%s): tasks are polled", error)
            self.close()

    @property
    def busy(self) -> bool:
        return bool(self.pidfds or self.polled or self.draining)

    def wake(self) -> None:
        """Make ``step`` return now (from any thread)."""
        self.woken.set()
        with self._wake_lock:
            if self.eventfd is not None:
                os.eventfd_write(self.eventfd, 1)

    def add(self, watch: Watch) -> bool:
        """Watch ``watch``; False where it is over already (its ``code`` says how)."""
        fd = self._pidfd(watch.pid) if self.selector is not None else None
        # Asked once now: a process that ended before its pidfd was opened, whose pid was
        # then reused, would never make that pidfd readable.
        code = watch.poll()
        if code is not None:
            if fd is not None:
                os.close(fd)
            over: list[Watch] = []
            self._ended(watch, code, over)
            return not over
        if fd is None:
            self.polled.append(watch)
        else:
            assert self.selector is not None
            self.selector.register(fd, selectors.EVENT_READ, watch)
            self.pidfds[fd] = watch
        return True

    def _pidfd(self, pid: int) -> int | None:
        """A pidfd of ``pid``, or None where the task is to be polled."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and len(self.pidfds) >= soft // 2:
            return None
        try:
            return os.pidfd_open(pid)
        except ProcessLookupError:  # gone already (not our child): its first poll says so
            return None
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOSYS, errno.ENOMEM):
                log.warning("pidfd of %d: %s; its task is polled", pid, error)
            return None

    def timeout(self, idle: float | None) -> float | None:
        """How long the next wait may last."""
        now = time.monotonic()
        dues = [self.next_poll - now] if self.polled else []
        dues += [self.next_drain - now] if self.draining else []
        if idle is not None:
            dues.append(idle)
        return max(0.0, min(dues)) if dues else None

    def step(self, timeout: float | None) -> list[Watch]:
        """Wait up to ``timeout`` seconds; the tasks that are over since."""
        over: list[Watch] = []
        if self.selector is None:
            self.woken.wait(timeout)
            self.woken.clear()
        else:
            for key, _ in self.selector.select(timeout):
                if key.fd == self.eventfd:
                    self._drain_eventfd()
                else:
                    self._readable(key.fd, over)
        now = time.monotonic()
        if self.polled and now >= self.next_poll:
            self.next_poll = now + POLL_SECONDS
            for watch in list(self.polled):
                code = watch.poll()
                if code is not None:
                    self.polled.remove(watch)
                    self._ended(watch, code, over)
        if self.draining and now >= self.next_drain:
            self.next_drain = now + DRAIN_SECONDS
            self._drain(over)
        return over

    def _drain_eventfd(self) -> None:
        assert self.eventfd is not None
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.eventfd)
        self.woken.clear()

    def _readable(self, fd: int, over: list[Watch]) -> None:
        """The shim behind ``fd`` has ended: reap it, or read how its task ended."""
        watch = self.pidfds.pop(fd)
        assert self.selector is not None
        self.selector.unregister(fd)
        os.close(fd)
        code = watch.poll()
        if code is None:  # not seen as ended yet (a child another thread waits on)
            self.polled.append(watch)
        else:
            self._ended(watch, code, over)

    def _ended(self, watch: Watch, code: int, over: list[Watch]) -> None:
        watch.code = code
        if watch.lingers():
            if not self.draining:
                self.next_drain = time.monotonic()
            self.draining.append(watch)
        else:
            over.append(watch)

    def _drain(self, over: list[Watch]) -> None:
        """Those stopped tasks whose group is gone, or was killed, are over."""
        lingering = [watch for watch in self.draining if watch.lingers()]
        alive = live_groups({watch.pid for watch in lingering})
        for watch in list(self.draining):
            if watch.pid not in alive or not watch.lingers():
                self.draining.remove(watch)
                over.append(watch)

    def close(self) -> None:
        """Close every descriptor: the tasks left are no longer watched."""
        for fd in self.pidfds:
            os.close(fd)
        self.pidfds.clear()
        if self.selector is not None:
            self.selector.close()
            self.selector = None
        with self._wake_lock:
            if self.eventfd is not None:
                os.close(self.eventfd)
                self.eventfd = None
