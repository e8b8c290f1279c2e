"""Process groups: every task is one, and nothing of it may outlive the task."""

from __future__ import annotations

import contextlib
import os
import signal
import time


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to every process of the group; a group that is gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def live_members(pgid: int) -> list[int]:
    """Pids of the group's processes that are still running (zombies excluded).

    Zombies are dead already; they linger only until their parent (often init) reaps them.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []
    import psutil  # only needed when a group outlives its leader

    members = []
    for process in psutil.process_iter(["status"]):
        try:
            zombie = process.info["status"] == psutil.STATUS_ZOMBIE
            if os.getpgid(process.pid) == pgid and not zombie:
                members.append(process.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def kill_group(pgid: int, timeout: float = 5.0) -> bool:
    """SIGKILL the whole group; wait until none of it runs (False if some outlive ``timeout``)."""
    signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
