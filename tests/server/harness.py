"""A real uvicorn server on a free loopback port, in a thread of the test process."""

from __future__ import annotations

import http.client
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from helpers import wait_for

from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.control.services.accounts import bootstrap
from trainfleet.control.services.bundle import Services
from trainfleet.control.services.tokens import new_record, new_token
from trainfleet.domain.records import TeamRole, TokenRecord, UserRecord
from trainfleet.server.api_supervisor import ApartServer
from trainfleet.server.app import create_app
from trainfleet.server.host_paths import HostPaths
from trainfleet.server.listening import GRACEFUL_SHUTDOWN
from trainfleet.server.settings import Settings
from trainfleet.store.database import Store


class LiveServer:
    """An engine on ``data_dir`` served over HTTP; ``stop()`` stops it and its jobs."""

    def __init__(
        self,
        data_dir: Path,
        engine: Engine | None = None,
        max_body: int = 64 << 10,
        host_paths: HostPaths | None = None,
        apart: bool = False,
        **more: Any,
    ):
        """``more``: other fields of the server's ``Settings``; ``apart``: the API in a
        process of its own (``trainfleet server --api-process``), the engine in this one."""
        self.engine = engine or engine_at(data_dir, vault=True)
        token = bootstrap(self.engine.store)
        assert token is not None
        self.token = token
        settings = Settings(
            workdir=data_dir.parent,
            max_body=max_body,
            poll_interval=0.05,
            host_paths=host_paths or HostPaths(),
            **more,
        )
        self.apart: ApartServer | None = None
        if apart:
            self._services = Services.of(self.engine)
            self._services.workflows.start()
            self.apart = ApartServer(
                self.engine, self._services, "127.0.0.1", 0, settings, None, lambda: None, print
            )
            return
        self.app = create_app(self.engine, settings)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def start(self) -> LiveServer:
        if self.apart is not None:
            self.apart.start()
            wait_for(lambda: ready(self.url), 60, "the API's process ready")
            return self
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive(), "the server did not start"
            assert time.monotonic() < deadline, "the server did not start in 30 s"
            time.sleep(0.01)
        return self

    @property
    def services(self) -> Services:
        """The server's services (``app.state``), as its routes call them (``apart``: the
        engine process's)."""
        if self.apart is not None:
            return self._services
        services: Services = self.app.state.services
        return services

    @property
    def api_pid(self) -> int:
        """The process that serves the API: the API's own (``apart``), else this one."""
        pid = self.apart.api.pid if self.apart is not None else os.getpid()
        assert pid is not None
        return pid

    @property
    def url(self) -> str:
        if self.apart is not None:
            return f"http://127.0.0.1:{self.apart.port}"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self.apart is not None:
            self.apart.stop()
            self._services.shutdown()
        else:
            self.server.should_exit = True
            self.thread.join(timeout=60)
        self.engine.store.close()


def ready(url: str) -> bool:
    """Whether the server at ``url`` says it is ready (``/readyz``)."""
    try:
        return httpx.get(f"{url}/readyz", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


class ServerProcess:
    """``trainfleet server`` in a subprocess, on a free port; its output lines are kept."""

    def __init__(
        self,
        data_dir: Path,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        program: Sequence[str] = ("-m", "trainfleet"),
    ) -> None:
        """``program``: what the interpreter runs, trainfleet's arguments after it (a script
        that serves through trainfleet's CLI)."""
        argv = [sys.executable, *program, "--data-dir", str(data_dir)]
        self.process = subprocess.Popen(
            [*argv, "server", "--port", "0", *(args or [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line = self.wait_for_line("Uvicorn running on ")
        self.url = re.sub(r".*Uvicorn running on (https?://\S+).*", r"\1", line)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for_line(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no line with {text!r} in:\n" + "\n".join(self.lines))

    @property
    def admin_token(self) -> str | None:
        found = [line for line in self.lines if "admin token (shown only this once): " in line]
        return found[0].rsplit(" ", 1)[1] if found else None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop it and print the end of its output: pytest shows it where the test failed
        (a 500's traceback is in the server's log only)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=60)
        self._reader.join(timeout=10)
        print("the server's last lines:", *self.lines[-200:], sep="\n")
        return code


def add_user(
    store: Store,
    name: str,
    team: str | None = "default",
    role: TeamRole = TeamRole.MEMBER,
    admin: bool = False,
) -> tuple[str, TokenRecord]:
    """A user (made if missing) in ``team`` with ``role``, and a new token of it."""
    if store.accounts.get_user(name) is None:
        store.accounts.add_user(UserRecord(name=name, admin=admin, created_at=time.time()))
    if team is not None:
        store.accounts.set_member(team, name, role)
    secret = new_token()
    record = new_record(f"t{secrets.token_hex(3)}", secret, name)
    store.add_token(record)
    return secret, record


def raw_status(url: str, path: str, token: str) -> int:
    """The status of a GET whose path goes out as written (httpx would remove its dot
    segments): for the proxy's refusals of sneaky paths."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        return connection.getresponse().status
    finally:
        connection.close()
