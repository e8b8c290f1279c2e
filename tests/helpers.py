"""Helpers for tests: the real `trainfleet` CLI, waiting, and process-group checks."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from trainfleet.backends.local.groups import live_members


def trainfleet(*args: str | Path) -> list[str]:
    """The argv of the real CLI, run with this interpreter."""
    return [sys.executable, "-m", "trainfleet", *map(str, args)]


def run_cli(
    *args: str | Path, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        trainfleet(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=os.environ.copy(),
    )


def in_ci() -> bool:
    """Whether this runs under CI, where what a test needs is never missing: it fails."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(what: str) -> NoReturn:
    """Skip the test, saying what it lacks; under CI, where nothing may lack, fail it."""
    if in_ci():
        pytest.fail(f"CI must have what this test needs: {what}")
    pytest.skip(what)


def wait_for(
    predicate: Callable[[], object], timeout: float = 60, what: str = "condition"
) -> object:
    """Poll until ``predicate()`` is truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``30m``) mounted at ``mount`` for the block, unmounted after (a
    small disk that fills for real; mounting needs root, which CI has)."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        missing(f"cannot mount a tmpfs here (root is needed): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill_disk(path: Path) -> None:
    """Write ``path`` until its disk has no byte left."""
    for block in (b"\0" * (1 << 20), b"\0" * 512):  # then the last partial page
        with path.open("ab", buffering=0) as filler:
            try:
                while True:
                    filler.write(block)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error


def process_group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies awaiting init do not count)."""
    return bool(live_members(pgid))


def kill_processes_under(folder: Path) -> None:
    """SIGKILL every process that runs in ``folder`` or names it (a failed test's leftovers).

    A process leading its own group (a task's shim) is killed with its whole group.
    """
    import psutil

    for process in psutil.process_iter(["cmdline", "cwd"]):
        names = [*(process.info["cmdline"] or []), process.info["cwd"] or ""]
        if process.pid == os.getpid() or not any(str(folder) in name for name in names):
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == process.pid:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()


def processes_naming(folder: Path) -> list[int]:
    """The pids of the processes whose command line names ``folder`` (leftovers)."""
    mark = str(folder).encode()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if mark in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # gone meanwhile
    return found


SIM_ADOPT = Path(__file__).parent / "backends" / "sim_adopt.py"


def killed_sim_engine(data: Path) -> tuple[str, str, str]:
    """The data directory ``data`` of an engine on the simulated backend killed with -9
    while it ran three jobs (``backends/sim_adopt.py``): their ids (one that runs on, one
    that ends a second after its start, one waiting for a place)."""
    done = subprocess.run(
        [sys.executable, str(SIM_ADOPT), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=data.parent,
    )
    assert done.returncode == -9, done.stdout + done.stderr
    forever, ends, waits = json.loads(done.stdout.splitlines()[-1])
    return forever, ends, waits


POSTGRES_URL = "TRAINFLEET_TEST_POSTGRES_URL"


def postgres_admin_url() -> str:
    """The server to test against; skips (fails under CI) when none is configured."""
    url = os.environ.get(POSTGRES_URL)
    if url:
        return url
    message = (
        f"{POSTGRES_URL} is not set (run: export {POSTGRES_URL}=$(bash scripts/postgres.sh start))"
    )
    missing(f"the store on PostgreSQL: {message}")


@contextmanager
def fresh_postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards."""
    import psycopg

    admin = postgres_admin_url()
    name = f"trainfleet_test_{secrets.token_hex(6)}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            for _ in range(100):
                try:
                    connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                    break
                except psycopg.errors.InsufficientPrivilege:
                    # An autovacuum worker on it, which only pg_signal_backend may end (a
                    # cluster not made by scripts/postgres.sh): it is done in moments.
                    time.sleep(0.1)
            else:  # still there after 10 s: say why
                connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def every_answer(url: str, token: str, job_id: str, missing_ok: bool = False) -> bytes:
    """The bodies of every reading endpoint of the server at ``url`` about the job and the
    secrets, followed streams and the metrics included (``missing_ok``: a 404 counts too,
    for a job stopped before it had a log)."""
    paths = [
        "/jobs", f"/jobs/{job_id}", f"/jobs/{job_id}/events", f"/jobs/{job_id}/events/follow",
        f"/jobs/{job_id}/tasks/worker/0/log", f"/jobs/{job_id}/tasks/worker/0/log/follow",
        f"/jobs/{job_id}/setup/log", "/secrets", "/queues", "/teams", "/users", "/whoami",
    ]  # fmt: skip
    allowed = (200, 404) if missing_ok else (200,)
    bodies = b""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=f"{url}/api/v1", headers=headers) as http:
        for path in paths:
            answer = http.get(path, timeout=60)
            assert answer.status_code in allowed, (path, answer.text)
            bodies += answer.content
        bodies += http.get(f"{url}/metrics", timeout=60).content
    return bodies


def example_job_files() -> list[Path]:
    """Every job file of ``examples/`` (a workflow file is no job file), by path."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    return sorted(
        path for path in examples.glob("*/*.yaml") if "kind: Workflow" not in path.read_text()
    )
