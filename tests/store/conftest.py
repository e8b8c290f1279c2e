"""Every store test runs against SQLite and against a real PostgreSQL, each on a clean database.

PostgreSQL comes from ``TRAINFLEET_TEST_POSTGRES_URL`` (``scripts/postgres.sh start`` prints
one); each test gets a database of its own, dropped afterwards. Without the variable the
PostgreSQL cases skip, except under CI (``CI`` set), where they fail: CI never skips them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainfleet.domain.records import JobRecord
from trainfleet.store.database import Store


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
        return JobRecord.from_row({**values, **fields})

    return make
