"""The ``trainfleet`` console script: a command through this user's warm starter when one
runs, else the CLI in this process, and a starter started (once the command is over) for the
next one. Standard library only: its imports are all a warm command pays for."""

from __future__ import annotations

import os
import socket
import sys

WARM_COMMANDS = frozenset({"run", "submit", "list", "describe", "logs", "events", "stop", "delete"})
"""Commands a starter runs; the rest (``server``, ``tf-server``, the administrators') start
cold: they are rare, long or both."""
GLOBAL_OPTIONS = frozenset({"--data-dir", "--server", "--ca-cert", "--backend"})
"""The CLI's global options that take a value (``cli.main``; a test holds them equal)."""
SWITCH = "TRAINFLEET_STARTER"
OFF, ON = frozenset({"0", "off", "no", "false"}), frozenset({"", "1", "on", "yes", "true"})
IDLE = "TRAINFLEET_STARTER_IDLE"
"""Seconds a starter waits for its next command before it ends (default 600)."""
FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGWINCH", "SIGUSR1", "SIGUSR2")


def command_of(argv: list[str]) -> str | None:
    """The command word of ``trainfleet ARGV``: the first word after the global options."""
    words = iter(argv)
    for word in words:
        if word in GLOBAL_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def wanted(argv: list[str], environ: os._Environ[str] | dict[str, str]) -> bool:
    """Whether ``trainfleet ARGV`` goes through a starter. SystemExit(2) for a switch that is
    neither on nor off."""
    switch = environ.get(SWITCH, "").strip().lower()
    if switch not in OFF | ON:
        sys.stderr.write(f"trainfleet: {SWITCH} must be on or off, not {environ[SWITCH]!r}\n")
        raise SystemExit(2)
    return switch in ON and command_of(argv) in WARM_COMMANDS


def _connect(path: str) -> socket.socket:
    import struct

    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
        _pid, uid, _gid = struct.unpack(
            "3i", client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        )
        if uid != os.getuid():
            raise PermissionError(f"{path} is served by uid {uid}")
    except OSError:
        client.close()
        raise
    return client


def start_starter(folder: str, name: str) -> None:
    """A starter of key ``name`` in the background: its own session, no terminal, its
    errors in ``folder/name.log``; ``-P``: no working folder on its import path."""
    argv = [sys.executable, "-P", "-m", "trainfleet.starter.server", folder, name]
    argv.append(os.environ.get(IDLE, "600"))
    env = dict(os.environ)
    if env.get("PYTHONPATH"):  # the starter works from /: a relative entry would miss
        env["PYTHONPATH"] = os.pathsep.join(
            map(os.path.abspath, env["PYTHONPATH"].split(os.pathsep))
        )
    os.posix_spawn(
        sys.executable,
        argv,
        env,
        setsid=True,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.path.join(folder, name + ".log"), _LOG_FLAGS, 0o600),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
    )


_LOG_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC


def _read_line(client: socket.socket) -> bytes:
    received = b""
    while not received.endswith(b"\n"):
        chunk = client.recv(256)
        if not chunk:
            break
        received += chunk
    return received


def through_starter(later: list[tuple[str, str]]) -> int | None:
    """The command's exit status, run by this user's starter; None: run it here (and
    ``later`` gets the folder and key of the starter to start once it is over)."""
    from trainfleet.starter import place, protocol

    folder = place.private_folder()
    name = place.key()
    try:
        client = _connect(os.path.join(folder, name + ".sock"))
    except OSError:
        later.append((folder, name))
        return None
    import signal

    with client:
        client.settimeout(protocol.HANDSHAKE_SECONDS)
        client.sendall(protocol.request())
        if not _read_line(client).startswith(b"ok "):
            return None  # nothing was run: the starter said no, or is ending
        socket.send_fds(client, [protocol.GO], [0, 1, 2])
        client.settimeout(None)

        def forward(number: int, _frame: object) -> None:
            try:  # noqa: SIM105 (contextlib: one more import on every command)
                client.send(bytes([number]))
            except OSError:
                pass

        for signame in FORWARDED:
            number = getattr(signal, signame)
            if signal.getsignal(number) is not signal.SIG_IGN:  # ignored here: in the child too
                signal.signal(number, forward)
        status = b""
        while True:
            try:
                chunk = client.recv(256)
            except InterruptedError:
                continue
            if not chunk:
                break
            status += chunk
    words = status.split()
    if len(words) < 2 or words[0] != b"exit":
        sys.stderr.write("trainfleet: the starter ended during the command; status unknown\n")
        return 1
    code = int(words[1])
    if code < 0:  # killed by a signal: this process dies by it too, as a shell expects
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def main() -> None:
    """``trainfleet``: through a starter where ``wanted``, else ``cli.main`` here."""
    later: list[tuple[str, str]] = []
    if wanted(sys.argv[1:], os.environ):
        try:
            code = through_starter(later)
        except OSError:  # a timeout among them
            code = None
        except KeyboardInterrupt:  # before the command started
            sys.exit(130)
        if code is not None:
            sys.exit(code)
    from trainfleet.cli.main import main
    from trainfleet.process_exit import exit_status

    code = exit_status(main)
    for folder, name in later:  # after the command: its imports would compete with ours
        try:  # noqa: SIM105
            start_starter(folder, name)
        except OSError:
            pass
    os._exit(code)  # as ``process_exit.run_and_exit``: without the interpreter's teardown
