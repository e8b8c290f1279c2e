"""The controller's side of ``TaskReports`` for backend tests: every exit and placement a
backend reports, in order."""

from __future__ import annotations

import queue
import time

from trainfleet.backends.api import Outside
from trainfleet.scheduling.placement import TaskKey

EXIT_SECONDS = 90.0
"""How long a test waits for a task's exit."""


class Reports:
    def __init__(self) -> None:
        self.exits: queue.Queue[tuple[TaskKey, int, Outside | None]] = queue.Queue()
        self.places: list[tuple[TaskKey, str, str]] = []

    def exited(self, key: TaskKey, returncode: int, outside: Outside | None = None) -> None:
        self.exits.put((key, returncode, outside))

    def placed(self, key: TaskKey, address: str, note: str) -> None:
        self.places.append((key, address, note))

    def next(self) -> tuple[int, Outside | None]:
        """The next exit: its code, and what outside the task ended it."""
        _, returncode, outside = self.exits.get(timeout=EXIT_SECONDS)
        return returncode, outside

    def codes(self, count: int = 1) -> dict[TaskKey, int]:
        """The next ``count`` exits, by task."""
        found = {}
        for _ in range(count):
            key, returncode, _ = self.exits.get(timeout=EXIT_SECONDS)
            found[key] = returncode
        return found

    def none_yet(self, seconds: float) -> bool:
        time.sleep(seconds)
        return self.exits.empty()
