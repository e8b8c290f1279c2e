"""Shared fixtures: a private data directory, job files, the real `trainfleet` CLI, and a
clean PostgreSQL database (from TRAINFLEET_TEST_POSTGRES_URL; skipped without it, failed
under CI, so CI never skips it)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from trainfleet.backends.local.groups import live_members
from trainfleet.control.engine import Engine
from trainfleet.store.layout import DataDir


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory of this test only, used by the CLI and by `engine`."""
    path = tmp_path / "data"
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", str(path))
    return path


@pytest.fixture
def engine(data_dir: Path) -> Iterator[Engine]:
    engine = Engine(DataDir(data_dir))
    yield engine
    engine.store.close()


@pytest.fixture
def job_file(tmp_path: Path) -> Callable[[str], Path]:
    """Writes a job file (dedented YAML) into the test's folder and returns its path."""

    def write(text: str, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


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


def process_group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies awaiting init do not count)."""
    return bool(live_members(pgid))


POSTGRES_URL = "TRAINFLEET_TEST_POSTGRES_URL"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def postgres_admin_url() -> str:
    """The server to test against; skips (fails under CI) when none is configured."""
    url = os.environ.get(POSTGRES_URL)
    if url:
        return url
    message = (
        f"{POSTGRES_URL} is not set (run: export {POSTGRES_URL}=$(bash scripts/postgres.sh start))"
    )
    if in_ci():
        pytest.fail(f"CI must test the store on PostgreSQL: {message}")
    pytest.skip(message)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database of this test only."""
    import psycopg

    admin = postgres_admin_url()
    name = f"trainfleet_test_{secrets.token_hex(6)}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    try:
        yield urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
