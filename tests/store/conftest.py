"""Every store test runs against SQLite and against a real PostgreSQL, each on a clean database.

PostgreSQL comes from ``TRAINFLEET_TEST_POSTGRES_URL`` (``scripts/postgres.sh start`` prints
one); each test gets a database of its own, dropped afterwards. Without the variable the
PostgreSQL cases skip, except under CI (``CI`` set), where they fail: CI never skips them.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from trainfleet.store.database import Store
from trainfleet.store.records import JobRecord

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


@pytest.fixture(params=["sqlite", "postgresql"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A clean database of either kind, as the path or URL that ``Store.open`` takes."""
    if request.param == "sqlite":
        return str(tmp_path / "trainfleet.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(target: str) -> Iterator[Store]:
    with Store.open(target) as store:
        yield store


@pytest.fixture
def make_job() -> Callable[..., JobRecord]:
    """``make_job("id", **fields)``: a valid job record, created now unless told otherwise."""

    def make(job_id: str = "demo-1", **fields: object) -> JobRecord:
        values: dict[str, object] = {
            "id": job_id,
            "name": "demo",
            "framework": "generic",
            "spec": "{}",
            "workdir": "/tmp",
            "created_at": time.time(),
        }
        return JobRecord.model_validate({**values, **fields})

    return make
