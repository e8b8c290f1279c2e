"""Helpers for tests: the real `trainfleet` CLI, waiting, and process-group checks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from trainfleet.backends.local.groups import live_members


def trainfleet(*args: str | Path) -> list[str]:
    """The argv of the real CLI, run with this interpreter."""
    return [sys.executable, "-m", "trainfleet", *map(str, args)]


def run_cli(
    *args: str | Path, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        trainfleet(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=os.environ.copy(),
    )


def wait_for(
    predicate: Callable[[], object], timeout: float = 60, what: str = "condition"
) -> object:
    """Poll until ``predicate()`` is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def process_group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies awaiting init do not count)."""
    return bool(live_members(pgid))
