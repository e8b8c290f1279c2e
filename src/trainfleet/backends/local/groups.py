"""Process groups: every task is one, and nothing of it may outlive the task."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Collection

from trainfleet.backends.supervision.shim import marked_processes


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


def live_groups(pgids: Collection[int]) -> set[int]:
    """Those of ``pgids`` that some running process (not a zombie) is still a member of:
    one look at the process table for them all."""
    found = set()
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:  # a member runs as another account
            pass
        found.add(pgid)
    if not found:
        return set()
    import psutil

    alive = set()
    for process in psutil.process_iter(["status"]):
        try:
            if process.info["status"] != psutil.STATUS_ZOMBIE:
                pgid = os.getpgid(process.pid)
                if pgid in found:
                    alive.add(pgid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def kill_group(pgid: int, timeout: float = 5.0) -> bool:
    """SIGKILL the whole group; wait until none of it runs (False if some outlive ``timeout``)."""
    signal_group(pgid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def end_attempt(marker: str, group: int | None = None, timeout: float = 5.0) -> bool:
    """SIGKILL every process of a task's attempt and wait until none runs (False if some
    outlive ``timeout``).

    The attempt's processes are the members of ``group`` (its process group, where it is
    known to be the attempt's) and every process whose environment holds ``marker``, with
    the groups they lead: a process that left the task's group (``setsid``) is found too,
    and pids that were reused are not mistaken for the attempt's.
    """
    deadline = time.monotonic() + timeout
    while True:
        marked = marked_processes(marker)
        for pgid in {pgid for _, pgid in marked} | ({group} if group is not None else set()):
            signal_group(pgid, signal.SIGKILL)
        for pid, _ in marked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not marked and (group is None or not live_members(group)):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
