"""The server's API in a process of its own (``trainfleet server --api-process``;
``docs/api-process.md``): uvicorn and the app over an ``EngineClient``. It reads the
store on a read-only connection of its own; everything that writes, and the engine's own
operations, run in the engine's process, through the door it was started with. It ends
when that process is gone.

Started by ``server.api_supervisor`` as ``python -m trainfleet.server.api_process DOOR_FD
LISTENER_FD``: the door's end of a socket pair, and the socket the server listens on.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, cast

import uvicorn

from trainfleet.control.door import DoorClient, DoorClosed, Forwarded
from trainfleet.control.engine_client import EngineClient, engine_over
from trainfleet.control.services.bundle import Services
from trainfleet.server.app import create_app
from trainfleet.server.listening import Tls, http_config
from trainfleet.server.settings import Settings

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine
    from trainfleet.workflows.driver import RunDriver
    from trainfleet.workflows.firing import ScheduleFiring

START_WITHIN = 60.0
"""Seconds the engine's process has to say how to serve (it answers at once once up)."""
ASK_WITHIN = 5.0
"""Seconds a readiness question to the engine's process may take."""
SERVER_CALLS = frozenset(
    {
        "config",
        "starting",
        "workflows.driver.wake",
        "workflows.driver.request",
        "workflows.firing.wake",
    }
)
"""What this process asks of the server's own parts there (besides the engine's calls)."""

log = logging.getLogger("trainfleet.server")


@dataclass(frozen=True)
class ApiConfig:
    """How to serve, as the engine's process tells it (the answer to ``config``)."""

    store: str
    """The store's path or URL (opened read-only here)."""
    data_dir: Path
    settings: Settings
    host: str
    port: int
    tls: Tls | None


class Starting:
    """Why the server is not ready yet, asked of the engine's process (its jobs being
    picked up) until it once says it is; what ``/readyz`` asks first."""

    def __init__(self, door: DoorClient) -> None:
        self._door = door
        self._ready = False

    def __call__(self) -> str | None:
        if self._ready:
            return None
        try:
            problem: str | None = self._door.call("starting").result(timeout=ASK_WITHIN)
        except (DoorClosed, FutureTimeout):
            return "the engine's process does not answer"
        self._ready = problem is None
        return problem


def services_over(door: DoorClient, engine: EngineClient) -> Services:
    """The services of ``engine``, in the process behind ``door``; the workflows' runs
    are driven there too (their driver follows the jobs' ends, which are written there)."""
    services = Services.of(cast("Engine", engine))
    services.workflows.driver = cast("RunDriver", Forwarded(door, "workflows.driver", wait=False))
    services.workflows.firing = cast(
        "ScheduleFiring", Forwarded(door, "workflows.firing", wait=False)
    )
    return services


def main(argv: list[str] | None = None) -> None:
    """Serve the API on the listener given until told to stop, or the engine's process
    is gone."""
    door_fd, listener_fd = (int(arg) for arg in (argv if argv is not None else sys.argv[1:]))
    door = DoorClient(Connection(door_fd))
    config: ApiConfig = door.call("config").result(timeout=START_WITHIN)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    services = services_over(door, engine_over(door, config.store, config.data_dir))
    app = create_app(services.engine, config.settings, services, starting=Starting(door))
    server = uvicorn.Server(http_config(app, config.host, config.port, config.tls))

    def end_with_the_engine() -> None:
        door.gone.wait()
        if not server.should_exit:
            log.error("the engine's process is gone: the API stops")
        server.should_exit = True

    threading.Thread(target=end_with_the_engine, name="door-watch", daemon=True).start()
    listener = socket.socket(fileno=listener_fd)
    try:  # (with sockets given, uvicorn says nothing of where: the engine's process said it)
        server.run(sockets=[listener])
    finally:
        door.close()


if __name__ == "__main__":
    from trainfleet.process_exit import run_and_exit

    run_and_exit(main)
