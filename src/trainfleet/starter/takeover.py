"""In a starter's forked child: become the client's process, run its command, say how it
ended. Whatever fails before the command starts is answered ``no``: the client runs it."""

from __future__ import annotations

import atexit
import contextlib
import os
import resource
import signal
import socket
import sys
import threading


def _adopt(fields: dict[str, bytes], fds: list[int]) -> None:
    """The client's signals, nice value, descriptors, folder, umask, limits, CPUs,
    environment and argv, in this process."""
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
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own, never closed)
    sys.stdout = open(1, "w", buffering=1 if os.isatty(1) else -1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


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


def _exit_code(error: SystemExit) -> int:
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def become(conn: socket.socket, fields: dict[str, bytes], fds: list[int]) -> None:
    """Run the client's command in this process, then end it. Never returns."""
    try:
        _adopt(fields, fds)
    except (OSError, ValueError) as error:
        try:
            conn.sendall(f"no {error}\n".encode())
        finally:
            os._exit(1)
    conn.sendall(f"ok {os.getpid()}\n".encode())
    threading.Thread(target=_relay, args=(conn,), daemon=True).start()
    code = 1
    try:
        from trainfleet.cli.main import main

        main()
        code = 0
    except SystemExit as error:
        code = _exit_code(error)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # as the interpreter would: the traceback, status 1
        import traceback

        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()  # what the interpreter runs at its exit
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    try:
        conn.sendall(f"exit {code}\n".encode())
    finally:
        os._exit(code)
