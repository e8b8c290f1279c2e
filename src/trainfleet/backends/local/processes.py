"""The local backend: every task is a process group on this machine, logging to a file."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from trainfleet.backends.api import ExitCallback, TaskLaunch
from trainfleet.backends.local.gpus import gpu_inventory
from trainfleet.backends.local.groups import kill_group, live_members, signal_group
from trainfleet.backends.local.ports import free_port
from trainfleet.scheduling.placement import TaskKey

GROUP_POLL_SECONDS = 0.02


@dataclass
class _Running:
    """A started task until its whole process group is gone."""

    process: subprocess.Popen[bytes]
    terminating: threading.Event = field(default_factory=threading.Event)
    killed: threading.Event = field(default_factory=threading.Event)


class LocalBackend:
    """Runs tasks as process groups here; one waiter thread per running task.

    A task ends when its whole group is gone, not just its first process: a shell that
    dies on SIGTERM leaves its children their grace period, and whatever a task leaves
    running when it exits on its own is killed with it.
    """

    def __init__(self) -> None:
        self._running: dict[TaskKey, _Running] = {}
        self._lock = threading.Lock()

    def host(self) -> str:
        return "127.0.0.1"

    def gpu_inventory(self) -> list[int]:
        return gpu_inventory()

    def reserve_ports(self, fixed: Mapping[TaskKey, int | None]) -> dict[TaskKey, int]:
        return {key: port or free_port() for key, port in fixed.items()}

    def start(self, launch: TaskLaunch, on_exit: ExitCallback) -> int:
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        with launch.log_path.open("ab") as log:
            process = subprocess.Popen(
                list(launch.argv),
                env=dict(launch.env),
                cwd=launch.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, out of reach of our Ctrl-C
            )
        running = _Running(process)
        with self._lock:
            self._running[launch.key] = running
        threading.Thread(
            target=self._wait, args=(launch.key, running, on_exit), daemon=True
        ).start()
        return process.pid

    def terminate(self, key: TaskKey) -> None:
        running = self._get(key)
        if running is not None:
            running.terminating.set()
            signal_group(running.process.pid, signal.SIGTERM)

    def kill(self, key: TaskKey) -> None:
        running = self._get(key)
        if running is not None:
            running.killed.set()
            signal_group(running.process.pid, signal.SIGKILL)

    def _get(self, key: TaskKey) -> _Running | None:
        with self._lock:
            return self._running.get(key)

    def _wait(self, key: TaskKey, running: _Running, on_exit: ExitCallback) -> None:
        code = running.process.wait()
        pgid = running.process.pid
        if running.terminating.is_set():
            # Being stopped: the rest of the group has its grace period, until kill().
            while live_members(pgid) and not running.killed.wait(GROUP_POLL_SECONDS):
                pass
        kill_group(pgid)
        with self._lock:
            del self._running[key]
        on_exit(key, code)
