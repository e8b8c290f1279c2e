"""This process's limit of open files, raised for a server: each running task holds one
descriptor (its pidfd, see ``watcher``)."""

from __future__ import annotations

import resource

_before: int | None = None
"""The soft limit before ``raise_open_files`` raised it (None: not raised)."""


def raise_open_files() -> None:
    """Raise the soft limit of open files to the hard one (once per process; where the
    kernel refuses, it stays)."""
    global _before
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _before is not None or hard == soft:
        return
    target = hard if hard != resource.RLIM_INFINITY else _kernel_most()
    if soft != resource.RLIM_INFINITY and soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return
    _before = soft


def tasks_open_files() -> int | None:
    """The soft limit that tasks get back (the one this process had before it raised its
    own: a program may choke on a high one), None where it was not raised."""
    return _before


def _kernel_most() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as most:
            return int(most.read())
    except (OSError, ValueError):
        return 1 << 20
