"""What a client and its starter say to each other on the starter's socket.

The client sends one request (``FIELDS``); the starter's child answers ``ok PID`` once it
took over all but the client's descriptors, or ``no WHY`` (the client then runs the command
itself); the client sends ``GO`` with its stdin, stdout and stderr (SCM_RIGHTS), and only
then does the child run the command: a client that gave up waiting runs it itself, and only
it, and left no descriptor of its own in a starter that hangs. The client gets ``exit CODE``
at the end (negative: killed by that signal); while it waits it sends one byte per signal it
was sent. Standard library only."""

from __future__ import annotations

import os
import resource
import signal
import sys

VERSION = b"1"
GO = b"\0"
HANDSHAKE_SECONDS = 5.0
"""How long a client waits for ``ok`` (a starter that hangs): then it runs the command."""
FIELDS = ("version", "ignored", "nice", "argv", "cwd", "umask", "limits", "cpus", "env")
"""A request's fields, in order."""
MAX_REQUEST = 4 << 20
"""A longer request (a 4 MiB environment) is refused."""


def request() -> bytes:
    """This process as a request: its argv, working folder, umask, resource limits, CPU
    affinity, nice value, ignored signals (nohup, ``&`` in a script) and environment."""
    umask = os.umask(0o022)
    os.umask(umask)
    limits = []
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            soft, hard = resource.getrlimit(getattr(resource, name))
            limits.append(f"{name}={soft},{hard}")
    ignored = [str(int(n)) for n in signal.valid_signals() if signal.getsignal(n) is signal.SIG_IGN]
    fields = (
        VERSION,
        " ".join(ignored).encode(),
        str(os.getpriority(os.PRIO_PROCESS, 0)).encode(),
        b"\0".join(os.fsencode(word) for word in sys.argv),
        os.fsencode(os.getcwd()),
        str(umask).encode(),
        " ".join(limits).encode(),
        " ".join(map(str, sorted(os.sched_getaffinity(0)))).encode(),
        b"\0".join(name + b"=" + value for name, value in os.environb.items()),
    )
    body = b"".join(len(field).to_bytes(4, "big") + field for field in fields)
    return len(body).to_bytes(4, "big") + body


def fields_of(data: bytes) -> dict[str, bytes] | None:
    """A whole request's fields by name; None while ``data`` is not all of it yet.
    ValueError: not a request of this version."""
    if len(data) < 4:
        return None
    size = int.from_bytes(data[:4], "big")
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes")
    if len(data) < 4 + size:
        return None
    values, at = [], 4
    while at < 4 + size:
        length = int.from_bytes(data[at : at + 4], "big")
        values.append(data[at + 4 : at + 4 + length])
        at += 4 + length
    if at != 4 + size or len(values) != len(FIELDS) or values[0] != VERSION:
        raise ValueError("not a request of this version")
    return dict(zip(FIELDS, values, strict=True))
