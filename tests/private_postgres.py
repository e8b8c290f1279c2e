"""A PostgreSQL cluster of one test's own, which the test may stop and start at will.

The shared test database (TRAINFLEET_TEST_POSTGRES_URL) is never stopped: other tests use
it. This one lives in a temporary directory, on a free port, run by the ``postgres`` user
(initdb refuses root; ``runuser`` as root, ``sudo`` otherwise, as scripts/postgres.sh does)
with the server binaries of /usr/lib/postgresql/*/bin.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def binaries() -> Path | None:
    """The folder of initdb and pg_ctl, or None where no PostgreSQL server is installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return found[-1].parent if found else None


def unavailable() -> str | None:
    """Why a private cluster cannot run here, or None when it can."""
    if binaries() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql"
    if not _as_postgres_prefix():
        return "no way to run as the postgres user (runuser as root, or sudo without a password)"
    return None


def skip_unless_available(what: str) -> None:
    """Skip the calling test where no private cluster can run here; under CI, which must
    run ``what``, fail it instead."""
    from helpers import missing

    why = unavailable()
    if why is not None:
        missing(f"{what}: {why}")


def _as_postgres_prefix() -> list[str]:
    if os.geteuid() == 0 and shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--"]
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0:
        return [sudo, "-n", "-u", "postgres", "--"]
    return []


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started cluster in a new temporary directory; stopped and removed afterwards."""
    # Not under pytest's tmp_path: the postgres user cannot enter root's 0700 folders there.
    root = Path(tempfile.mkdtemp(prefix="trainfleet-pg-"))
    cluster: PrivatePostgres | None = None
    try:
        cluster = PrivatePostgres(root)
        cluster.start()
        yield cluster
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(root, ignore_errors=True)


class PrivatePostgres:
    """``initdb`` in ``root``; ``start()``, ``stop()`` (fast: clients are cut off), ``freeze()``
    and ``thaw()`` (it hangs, then goes on), and ``url``."""

    def __init__(self, root: Path) -> None:
        bin_dir = binaries()
        assert bin_dir is not None, unavailable()
        self._bin = bin_dir
        self.root = root
        self.data = root / "pgdata"
        self.port = _free_port()
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        else:
            subprocess.run(["sudo", "-n", "chown", "postgres:postgres", str(root)], check=True)
        self._as_postgres(
            str(bin_dir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            str(self._bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "start",
            "-l",
            str(self.root / "log"),
        )

    def stop(self) -> None:
        self._as_postgres(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")

    def freeze(self) -> None:
        """SIGSTOP every process of the cluster: a database that hangs (its host frozen)
        instead of refusing. Connections stay open and new ones are accepted by the
        kernel, but nothing is ever answered until ``thaw``."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> None:
        for pid in self._processes():
            with contextlib.suppress(ProcessLookupError):  # a backend that ended meanwhile
                os.kill(pid, number)

    def _processes(self) -> list[int]:
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True
        ).stdout.split()
        return [postmaster, *map(int, children)]

    def close(self) -> None:
        """Stop the cluster if it runs (its files go with the temporary directory)."""
        if (self.data / "postmaster.pid").exists():
            self.thaw()
            self.stop()

    def _as_postgres(self, *argv: str) -> None:
        done = subprocess.run(
            [*_as_postgres_prefix(), *argv],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=self.root,
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stdout}{done.stderr}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
