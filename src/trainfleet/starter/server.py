"""A warm starter: ``python -P -m trainfleet.starter.server FOLDER KEY IDLE_SECONDS``.

Takes ``FOLDER/KEY.lock`` (one starter per key; a second one leaves at once), imports what
the warm commands need (``WARM``), listens on ``FOLDER/KEY.sock`` (0600), and forks, for each
request of this user (SO_PEERCRED), a child that becomes the client's process and runs its
command (``takeover``). It tells the client how a child killed by a signal ended, and ends
after IDLE_SECONDS without a child, when its socket is removed or replaced, or on SIGTERM.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path

from trainfleet.starter import protocol

WARM = (
    "trainfleet.cli.main",
    "trainfleet.cli.launch_commands",
    "trainfleet.cli.job_commands",
    "trainfleet.cli.embedded",
    "trainfleet.cli.remote",
    "trainfleet.cli.run_view",
    "trainfleet.control.assembly",
    "trainfleet.spec.loading",
    "trainfleet.starter.takeover",
)
"""What a warm command would import first; the rest it imports itself, as a cold one."""
MAX_CHILDREN = 64
"""More commands at once run in their clients."""
CHECK_SECONDS = 2.0


def warm_up() -> None:
    """Import ``WARM``, and do the once-per-process work of the libraries they use."""
    for name in WARM:
        importlib.import_module(name)
    from pydantic.plugin._loader import get_plugins  # every distribution's entry points

    list(get_plugins())


def sweep(folder: Path, mine: str) -> None:
    """Remove what starters of other keys left (a kill -9, an upgrade): their lock is free."""
    for lock in folder.glob("*.lock"):
        if lock.stem == mine:
            continue
        with contextlib.suppress(OSError), open(lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            for suffix in (".sock", ".log", ".lock"):
                lock.with_suffix(suffix).unlink(missing_ok=True)


class Starter:
    """The listening socket and the children running commands."""

    def __init__(self, path: Path, idle: float) -> None:
        self.path = path
        self.idle = idle
        self.children: dict[int, socket.socket] = {}
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path.unlink(missing_ok=True)
        old = os.umask(0o177)
        try:
            self.listener.bind(str(path))
        finally:
            os.umask(old)
        self.listener.listen(64)
        self.inode = path.stat().st_ino
        self.ending = False

    def serve(self) -> None:
        """Accept until idle, replaced or told to end."""
        signal.signal(signal.SIGCHLD, lambda *_: self.reap())
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "ending", True))
        last = time.monotonic()
        while not self.ending:
            try:
                ready, _, _ = select.select([self.listener], [], [], CHECK_SECONDS)
            except InterruptedError:
                continue
            if ready:
                self.accept()
                last = time.monotonic()
            elif self.children:
                last = time.monotonic()
            elif time.monotonic() - last > self.idle or not self.still_mine():
                break
        self.close()

    def still_mine(self) -> bool:
        try:
            return self.path.stat().st_ino == self.inode
        except OSError:
            return False

    def close(self) -> None:
        self.listener.close()
        if self.still_mine():
            self.path.unlink(missing_ok=True)

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            fields = self.receive(conn)
        except (OSError, ValueError) as error:
            print(f"refused a request: {error}", file=sys.stderr, flush=True)
            conn.close()
            return
        if len(self.children) >= MAX_CHILDREN:
            with contextlib.suppress(OSError):
                conn.sendall(b"no busy\n")
            conn.close()
            return
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
        try:
            pid = os.fork()
            if pid == 0:
                from trainfleet.starter.takeover import become

                self.listener.close()
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
                become(conn, fields)
            self.children[pid] = conn
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])

    @staticmethod
    def receive(conn: socket.socket) -> dict[str, bytes]:
        """A request of this user."""
        conn.settimeout(5.0)  # a client that connects and says nothing does not hold us
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        if uid != os.getuid():
            raise PermissionError(f"a client of uid {uid}")
        data = b""
        while (fields := protocol.fields_of(data)) is None:
            more = conn.recv(1 << 20)
            if not more:
                raise ValueError("a request cut short")
            data += more
        conn.settimeout(None)
        return fields

    def reap(self) -> None:
        """Wait for ended children; tell a client its child was killed (a child that ended
        by itself has said how)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            if os.WIFSIGNALED(status):
                with contextlib.suppress(OSError):
                    conn.sendall(f"exit {-os.WTERMSIG(status)}\n".encode())
            conn.close()


def main(folder: Path, name: str, idle: float) -> None:
    os.chdir("/")  # holds no mount busy
    lock = open(folder / f"{name}.lock", "a")  # noqa: SIM115 (held until the process ends)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return  # another starter of this key is starting or serving
    sweep(folder, name)
    warm_up()
    starter = Starter(folder / f"{name}.sock", idle)
    starter.serve()
    (folder / f"{name}.log").unlink(missing_ok=True)  # kept only when it ended badly


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]))
