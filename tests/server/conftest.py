"""A live server shared by the API tests, and an SDK client of it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from trainfleet.client import Client

from .harness import LiveServer


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # The API in a process of its own, as `trainfleet server` serves it; "0": in this one.
    apart = os.environ.get("TRAINFLEET_TEST_API_PROCESS", "1") != "0"
    server = LiveServer(tmp_path_factory.mktemp("server") / "data", apart=apart).start()
    yield server
    server.stop()


@pytest.fixture
def client(live: LiveServer) -> Iterator[Client]:
    with Client(live.url, live.token, timeout=30) as client:
        yield client
