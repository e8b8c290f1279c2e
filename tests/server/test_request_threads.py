"""A request's blocking work runs on a bounded number of threads (``WORKER_THREADS``):
large submissions that all wait for the engine hold that many, the rest wait their turn
without a thread, the server answers other requests meanwhile, and every submission is
answered once the engine answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import wait_for

from trainfleet.server.app import WORKER_THREADS
from trainfleet.server.routes_jobs import INLINE_TEXT
from trainfleet.wire import API_PREFIX

from .harness import LiveServer

SUBMISSIONS = 2 * WORKER_THREADS
LARGE = "# " + "x" * INLINE_TEXT + "\nname: large\nroles:\n  worker: {command: 'true'}\n"
"""A job read and stored in a worker thread (past ``INLINE_TEXT``), that runs one task."""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path / "data", max_body=INLINE_TEXT * 4).start()
    yield server
    server.stop()


def test_large_submissions_waiting_for_the_engine_hold_a_bounded_number_of_threads(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, lock = threading.Event(), threading.Lock()
    waiting: set[int] = set()
    most = 0
    submit = live.engine.submit

    def held(*args: Any, **kwargs: Any) -> Any:
        nonlocal most
        with lock:
            waiting.add(threading.get_ident())
            most = max(most, len(waiting))
        try:
            assert release.wait(60)
            return submit(*args, **kwargs)
        finally:
            with lock:
                waiting.discard(threading.get_ident())

    monkeypatch.setattr(live.engine, "submit", held)
    headers = {"Authorization": f"Bearer {live.token}", "Content-Type": "application/yaml"}

    def post() -> int:
        with httpx.Client(base_url=live.url, headers=headers, timeout=90) as http:
            return http.post(f"{API_PREFIX}/jobs", content=LARGE).status_code

    with ThreadPoolExecutor(SUBMISSIONS) as clients:
        answers = [clients.submit(post) for _ in range(SUBMISSIONS)]
        try:
            wait_for(lambda: len(waiting) >= WORKER_THREADS, 60, "every worker thread held")
            assert httpx.get(f"{live.url}/healthz", timeout=10).status_code == 200
            assert len(waiting) == WORKER_THREADS
        finally:
            release.set()
        assert [answer.result(timeout=90) for answer in answers] == [201] * SUBMISSIONS
    assert most == WORKER_THREADS
