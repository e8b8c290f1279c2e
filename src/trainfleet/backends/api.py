"""What the controller asks of a backend: places, starting, signalling. No policy here.

A backend reports what it sees (a task's process exited with a code); the controller
decides what that means (restart, succeed, fail).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trainfleet.scheduling.placement import TaskKey

ExitCallback = Callable[[TaskKey, int], None]
"""Called from a backend thread with the task and its raw exit status (negative: signal)."""


@dataclass(frozen=True)
class TaskLaunch:
    """Everything needed to start one task's process."""

    key: TaskKey
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    log_path: Path
    record: Path
    """Prefix of this attempt's supervision records (``.pid``, ``.exit``)."""


class Backend(Protocol):
    """Where the processes of tasks really run."""

    def host(self) -> str:
        """The host name tasks of this backend reach each other at."""
        ...

    def gpu_inventory(self) -> list[int]:
        """Host indices of the GPUs tasks may be given."""
        ...

    def reserve_ports(self, fixed: Mapping[TaskKey, int | None]) -> dict[TaskKey, int]:
        """A port for every task: the fixed one where given, else a free one."""
        ...

    def start(self, launch: TaskLaunch, on_exit: ExitCallback) -> int:
        """Start a task; returns its pid. ``on_exit`` is called once when it ends."""
        ...

    def terminate(self, pid: int) -> None:
        """Ask the task started as ``pid`` to stop (SIGTERM to its whole process group)."""
        ...

    def kill(self, pid: int) -> None:
        """Stop the task started as ``pid`` now (SIGKILL to its whole process group)."""
        ...

    def adopt(self, key: TaskKey, record: Path, on_exit: ExitCallback) -> int | None:
        """Follow a task that an earlier trainfleet process started, from its records.

        Returns its pid, or None when it is no longer running (``on_exit`` then follows).
        """
        ...
