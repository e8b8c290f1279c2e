"""Where a user's starters listen, and the key that says which starter may run a command.

Standard library only (the client imports it on every command)."""

from __future__ import annotations

import os
import stat
import sys
import zlib

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The trainfleet package this starter runs: every file of it is in the key."""

READ_AT_START = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR")
"""Environment an interpreter or a library reads once, at startup or import: a starter per
value (beside every ``PYTHON*`` variable)."""


SOCKET_PATH = 107
"""The most bytes of a UNIX socket's path (``sun_path``, less its final NUL)."""

SOCKET_NAME = len("/0123456789abcdef.sock")
"""A starter's socket in its folder: its key (16 hex digits) and ``.sock``."""


def private_folder() -> str:
    """This user's folder for starters (``$XDG_RUNTIME_DIR/trainfleet``, else, or where that
    is too deep for a socket's path, ``/tmp/trainfleet-UID``), made 0700. OSError when it
    is not this user's alone: a folder or link someone else put there is never used."""
    uid = os.getuid()
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = os.path.join(base, "trainfleet") if base else ""
    if not folder or len(os.fsencode(folder)) + SOCKET_NAME > SOCKET_PATH:
        folder = f"/tmp/trainfleet-{uid}"
    try:  # noqa: SIM105 (contextlib: one more import on every command)
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        raise PermissionError(f"{folder} is not a private folder of uid {uid}")
    return folder


def _source_files() -> list[str]:
    parts = []
    stack = [SOURCE]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.name.endswith(".py"):
                    info = entry.stat()
                    parts.append(f"{entry.path}:{info.st_size}:{info.st_mtime_ns}")
                elif entry.is_dir() and entry.name != "__pycache__":
                    stack.append(entry.path)
    return parts


def _process_context() -> list[str]:
    parts = []
    try:
        with open("/proc/self/cgroup", "rb") as cgroup:  # a Slurm step, a systemd unit
            parts.append(cgroup.read().decode(errors="replace"))
        for space in ("mnt", "net", "pid", "user"):
            parts.append(f"{space}:{os.stat(f'/proc/self/ns/{space}').st_ino}")
    except OSError:
        parts.append("no /proc")
    return parts


def key() -> str:
    """What a starter's imported code and its process depend on, hashed: the interpreter and
    its flags, the user and groups, the import path (a folder's mtime moves when a package is
    installed there), every trainfleet source file (path, size, mtime), the environment read
    at startup, the cgroup and the namespaces. A client only talks to a starter of its key."""
    parts = [sys.executable, sys.version, repr(sys.flags), str(os.getuid()), str(os.getgid())]
    parts.append(" ".join(map(str, sorted(os.getgroups()))))
    for entry in sys.path[1:]:  # [0] is the console script's folder
        try:
            parts.append(f"{entry}:{os.stat(entry or '.').st_mtime_ns}")
        except OSError:
            parts.append(entry)
    parts += _source_files()
    for name, value in sorted(os.environ.items()):
        if name.startswith(("PYTHON", "LC_")) or name in READ_AT_START:
            parts.append(f"{name}={value}")
    parts += _process_context()
    data = "\0".join(parts).encode(errors="surrogateescape")
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"
