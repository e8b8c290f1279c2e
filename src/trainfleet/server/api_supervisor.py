"""The engine's side of a server whose API runs in a process of its own
(``trainfleet server --api-process``; ``docs/api-process.md``).

This process keeps the engine and everything that writes: the jobs' controllers, the
store's writers, the workflows' driver, the resume, the audit pruning. It listens, and
starts the API's process (``server.api_process``) on that socket with a door to this one;
starts another if it dies (the socket stays open meanwhile: clients wait, none is
refused); and stops it first when the server stops.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from multiprocessing.connection import Connection
from typing import Any

from trainfleet.control.door import DoorServer
from trainfleet.control.engine import Engine
from trainfleet.control.engine_client import ENGINE_CALLS
from trainfleet.control.forwarded_store import door_calls
from trainfleet.control.services.bundle import Services
from trainfleet.control.services.workflows import Workflows
from trainfleet.server.api_process import SERVER_CALLS, ApiConfig
from trainfleet.server.listening import GRACEFUL_SHUTDOWN, Tls, listen_on
from trainfleet.server.resumption import Resumption
from trainfleet.server.sessions import Sessions
from trainfleet.server.settings import Settings

RESTARTS = 5
"""Most starts of the API's process within RESTART_WINDOW: one more and the server stops
(something kills it as it starts; restarting for ever would hide that)."""
RESTART_WINDOW = 60.0
STOP_WITHIN = GRACEFUL_SHUTDOWN + 10
"""Seconds the API's process has to end once told to (its open streams are cut after
GRACEFUL_SHUTDOWN); then it is killed."""

log = logging.getLogger("trainfleet.server")


class ServerDoor:
    """What the API's process may call in this one: the engine's operations and its
    store's writes, the workflows' driver, whether the jobs are picked up yet, and how to
    serve (``config``)."""

    CALLS = ENGINE_CALLS | door_calls() | SERVER_CALLS

    def __init__(
        self,
        engine: Engine,
        workflows: Workflows,
        starting: Callable[[], str | None],
        config: ApiConfig,
    ) -> None:
        self._engine = engine
        self.workflows = workflows
        self.starting = starting
        self._config = config

    def config(self) -> ApiConfig:
        return self._config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)  # only the names in CALLS are ever asked


class ApiProcess:
    """The API's process, on ``listener``, its calls answered by ``door``; ``failed`` is
    told why when it keeps dying."""

    def __init__(
        self, door: ServerDoor, listener: socket.socket, failed: Callable[[str], None]
    ) -> None:
        self._door = door
        self._listener = listener
        self._failed = failed
        self._lock = threading.Lock()
        self._stopping = False
        self._process: subprocess.Popen[bytes] | None = None
        self._starts: deque[float] = deque(maxlen=RESTARTS)
        self._watcher = threading.Thread(target=self._watch, name="api-process", daemon=True)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        with self._lock:
            self._spawn()
        self._watcher.start()

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        fds = (theirs.fileno(), self._listener.fileno())
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "trainfleet.server.api_process", *map(str, fds)],
                pass_fds=fds,
            )
        server = DoorServer(Connection(ours.detach()), self._door, ServerDoor.CALLS)
        threading.Thread(target=server.serve, name="door", daemon=True).start()
        self._starts.append(time.monotonic())

    def _watch(self) -> None:
        while True:
            assert self._process is not None
            code = self._process.wait()
            with self._lock:
                if self._stopping:
                    return
                if len(self._starts) == RESTARTS and (
                    time.monotonic() - self._starts[0] < RESTART_WINDOW
                ):
                    self._failed(
                        f"the API's process ended {RESTARTS} times within "
                        f"{RESTART_WINDOW:g} s (its last exit status: {code})"
                    )
                    return
                log.error("the API's process ended (exit status %s): starting another", code)
                self._spawn()

    def stopping(self) -> None:
        """The server is stopping: the API's process is not started again when it ends
        (a Ctrl-C reaches both processes). No lock: a signal handler calls it."""
        self._stopping = True

    def stop(self) -> None:
        """End the API's process (its open requests get GRACEFUL_SHUTDOWN seconds)."""
        with self._lock:
            self._stopping = True
            process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class ApartServer:
    """A server's listener and its API's process, over ``engine`` and ``services`` (this
    process's): the API is served once ``start`` returns, until ``stop``. ``failed`` is
    told why when the API's process keeps dying."""

    def __init__(
        self,
        engine: Engine,
        services: Services,
        host: str,
        port: int,
        settings: Settings,
        tls: Tls | None,
        starting: Callable[[], str | None],
        failed: Callable[[str], None],
    ) -> None:
        Sessions.of_data_dir(engine.data_dir.root)  # its key made here: an error is named
        self.listener = listen_on(host, port, tls)  # (not inherited: pass_fds gives it)
        target = engine.store.target
        config = ApiConfig(
            store=str(target.path) if target.path is not None else target.url,
            data_dir=engine.data_dir.root,
            settings=settings,
            host=host,
            port=port,
            tls=tls,
        )
        door = ServerDoor(engine, services.workflows, starting, config)
        self.api = ApiProcess(door, self.listener, failed)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def start(self) -> None:
        self.api.start()

    def stop(self) -> None:
        self.api.stop()
        self.listener.close()


def serve_apart(
    engine: Engine,
    services: Services,
    host: str,
    port: int,
    settings: Settings,
    tls: Tls | None,
    pruning: AbstractContextManager[object],
) -> None:
    """``serve``, with the API in a process of its own, until SIGINT or SIGTERM (or the
    API's process keeps dying: SystemExit saying so)."""
    stopped = threading.Event()
    why: list[str] = []
    signals: list[int] = []

    def failed(reason: str) -> None:
        why.append(reason)
        stopped.set()

    resumption = Resumption(engine.resume_jobs, lambda _: stopped.set())
    server = ApartServer(engine, services, host, port, settings, tls, resumption.problem, failed)
    services.workflows.start()  # the driver follows jobs' ends: it runs where they are written

    def on_signal(signum: int, _: object) -> None:
        server.api.stopping()
        signals.append(signum)
        stopped.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    resumption.start()
    try:
        with pruning:
            server.start()
            while not stopped.wait(1):
                pass
    finally:
        server.stop()
        services.shutdown()
    if resumption.error is not None:
        raise resumption.error
    if why:
        sys.exit(f"error: {why[0]}")
    if signals and signals[0] == signal.SIGTERM:  # as a one-process server ends (Ctrl-C: 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
