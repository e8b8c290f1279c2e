"""In a starter's forked child: become the client's process, run its command, say how it
ended. Whatever fails before the command starts is answered ``no``: the client runs it."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import sys
import threading
from typing import NoReturn, TextIO

from trainfleet.starter import protocol


def _adopt(fields: dict[str, bytes]) -> None:
    """The client's signals, nice value, folder, umask, limits, CPUs, environment and argv,
    in this process."""
    for handled in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(handled, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for ignored in fields["ignored"].split():
        signal.signal(int(ignored), signal.SIG_IGN)
    os.setpriority(os.PRIO_PROCESS, 0, int(fields["nice"]))  # lower than ours: refused
    for limit in fields["limits"].decode().split():
        name, _, values = limit.partition("=")
        soft, hard = map(int, values.split(","))
        resource.setrlimit(getattr(resource, name), (soft, hard))  # above our hard: refused
    os.sched_setaffinity(0, [int(cpu) for cpu in fields["cpus"].split()])
    os.chdir(os.fsdecode(fields["cwd"]))
    os.umask(int(fields["umask"]))
    os.environ.clear()
    for pair in fields["env"].split(b"\0"):
        name_, equals, value = pair.partition(b"=")
        if equals:
            os.environb[name_] = value
    sys.argv = [os.fsdecode(word) for word in fields["argv"].split(b"\0")]


def _take_streams(fds: list[int]) -> None:
    """The client's stdin, stdout and stderr as this process's."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = _stream(0, sys.__stdin__)
    sys.stdout = _stream(1, sys.__stdout__)
    sys.stderr = _stream(2, sys.__stderr__)


def _stream(fd: int, like: TextIO | None) -> TextIO:
    """Descriptor ``fd`` as the interpreter makes its standard stream: the encoding and error
    handler of this process's own (the locale and ``PYTHONIOENCODING``, the same as the
    client's: both are in the key), line-buffered where the interpreter would be."""
    buffering = 1 if fd == 2 or (fd == 1 and os.isatty(1)) else -1
    encoding, errors = (like.encoding, like.errors) if like is not None else (None, None)
    if fd == 0:
        return open(0, encoding=encoding, errors=errors, closefd=False)
    return open(fd, "w", buffering=buffering, encoding=encoding, errors=errors, closefd=False)


def _relay(conn: socket.socket) -> None:
    """Signals the client forwards, sent to this process; its client gone (kill -9): this
    process goes the same way, as it would have were it the client."""
    while True:
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if not data:
            os.kill(os.getpid(), signal.SIGKILL)
        for number in data:
            os.kill(os.getpid(), number)


def become(conn: socket.socket, fields: dict[str, bytes]) -> NoReturn:
    """Run the client's command in this process, then end it: never returns, whatever is
    raised (the starter's own loop must not go on in a child)."""
    code = 1
    try:
        if _taken_over(conn, fields):
            from trainfleet.cli.main import main
            from trainfleet.process_exit import exit_status

            code = exit_status(main)
            with contextlib.suppress(OSError):
                conn.sendall(f"exit {code}\n".encode())
    finally:
        os._exit(code)


def _taken_over(conn: socket.socket, fields: dict[str, bytes]) -> bool:
    """This process as the client's, once the client said go with its descriptors; False:
    the client runs the command itself (this one could not become it, or it gave up)."""
    try:
        _adopt(fields)
    except (OSError, ValueError) as error:
        conn.sendall(f"no {error}\n".encode())
        return False
    conn.sendall(f"ok {os.getpid()}\n".encode())
    go, fds, _, _ = socket.recv_fds(conn, 1, 3)
    if go != protocol.GO or len(fds) != 3:
        return False
    _take_streams(fds)
    threading.Thread(target=_relay, args=(conn,), daemon=True).start()
    return True
