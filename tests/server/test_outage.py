"""A database outage in the middle of a burst: 503s, not 500s; nothing stalls afterwards.

A real `trainfleet server` on a real PostgreSQL of this test's own, stopped (``pg_ctl stop
-m fast``, which cuts every connection) while clients submit, then started again. The server
is never restarted: every job it acknowledged must end as it should, by itself.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from helpers import wait_for
from private_postgres import PrivatePostgres, private_postgres, skip_unless_available

from .harness import ServerProcess

TOKEN = "outage-test-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SHORT_JOB = "name: nap\nroles:\n  main: {command: sleep 0.5, resources: {cpu: 0.1}}\n"
LONG_JOB = (
    "name: long\nrestart: {policy: on-failure}\n"
    "roles:\n  main: {command: sleep 4, resources: {cpu: 0.1}}\n"
)
OUTAGE = 20.0
"""Seconds the database stays stopped."""
CLIENTS = 16
HEALTH_TIMEOUT = 5.0
"""Seconds /healthz may take during the outage (it answers in milliseconds)."""


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    skip_unless_available("the outage test")
    with private_postgres() as cluster:
        yield cluster


class Submitter:
    """Clients that submit short jobs until told to stop; what they got back is kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: Counter[int] = Counter()
        self.acknowledged: list[str] = []
        self.retry_after: set[str] = set()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._submit) for _ in range(CLIENTS)]

    def __enter__(self) -> Submitter:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _submit(self) -> None:
        with httpx.Client(base_url=self.url, headers=AUTH, timeout=30) as client:
            while not self._stop.is_set():
                response = client.post(
                    "/api/v1/jobs",
                    content=SHORT_JOB,
                    headers={"Content-Type": "application/yaml"},
                )
                self.statuses[response.status_code] += 1
                if response.status_code == 201:
                    self.acknowledged.append(response.json()["job"]["id"])
                elif response.status_code == 503:
                    self.retry_after.add(response.headers.get("retry-after", ""))
                    time.sleep(0.2)
                time.sleep(0.1)


def test_a_database_outage_mid_burst_gives_503s_and_every_acknowledged_job_ends(
    postgres: PrivatePostgres, tmp_path: Path
) -> None:
    server = _server_on(postgres, tmp_path)
    try:
        client = httpx.Client(base_url=server.url, headers=AUTH, timeout=30)
        with _outage_under_load(client, server) as (long_job, submitter):
            postgres.stop()
            stopped = time.monotonic()
            # /readyz says so within a few seconds; /healthz (liveness) stays 200.
            wait_for(lambda: client.get("/readyz").status_code == 503, 10, "/readyz: 503")
            not_ready = client.get("/readyz")
            assert "store" in not_ready.json()["detail"]
            assert not_ready.headers["retry-after"]
            # Liveness all along: no request waits on the store for long, so none holds up
            # the server (a generous timeout: a blocked event loop took 21 s to answer).
            while time.monotonic() < stopped + OUTAGE:  # the long job ends meanwhile
                assert client.get("/healthz", timeout=HEALTH_TIMEOUT).status_code == 200
                time.sleep(0.5)
            postgres.start()
        assert submitter.statuses[503] > 0, submitter.statuses
        assert submitter.statuses[500] == 0, submitter.statuses
        assert set(submitter.statuses) <= {201, 503}, submitter.statuses
        assert submitter.retry_after == {"2"}
        _all_succeeded(client, server, [long_job, *submitter.acknowledged])
        _never_restarted(client, long_job)
        outage_lines = [line for line in server.lines if "waiting for it" in line]
        assert 1 <= len(outage_lines) <= 3, outage_lines  # once per outage, not per call
        answered = [line for line in server.lines if re.search(r"\b503 for (GET|POST) ", line)]
        assert 1 <= len(answered) <= 2 * (OUTAGE // 10 + 2), answered  # not one per request
    finally:
        server.stop()


@contextmanager
def _outage_under_load(
    client: httpx.Client, server: ServerProcess
) -> Iterator[tuple[str, Submitter]]:
    """A ready server running a long job, and clients submitting: the block brings the
    outage about and ends it; after it, the server is ready again and acknowledges more."""
    assert client.get("/readyz").status_code == 200
    long_job = client.post("/api/v1/jobs", content=LONG_JOB).json()["job"]["id"]
    wait_for(lambda: _state(client, long_job) == "running", 30, "the long job running")
    with Submitter(server.url) as submitter:
        wait_for(lambda: len(submitter.acknowledged) >= 10, 30, "10 jobs acknowledged")
        yield long_job, submitter
        wait_for(lambda: client.get("/readyz").status_code == 200, 15, "/readyz: 200")
        before = len(submitter.acknowledged)
        wait_for(lambda: len(submitter.acknowledged) >= before + 10, 30, "10 more acknowledged")


def _server_on(postgres: PrivatePostgres, tmp_path: Path) -> ServerProcess:
    """A server on ``postgres``, its URL given in a file."""
    url_file = tmp_path / "database-url"
    url_file.write_text(postgres.url + "\n")
    return ServerProcess(
        tmp_path / "data",
        {"TRAINFLEET_ADMIN_TOKEN": TOKEN},
        ["--database-url-file", str(url_file)],
    )


def _all_succeeded(client: httpx.Client, server: ServerProcess, job_ids: list[str]) -> None:
    """Every job ends succeeded, and the server said nothing of an exception meanwhile."""
    for job_id in job_ids:
        wait_for(lambda: _state(client, job_id) == "succeeded", 60, job_id)  # noqa: B023
    assert not [line for line in server.lines if "Traceback" in line]
    assert not [line for line in server.lines if "Exception in thread" in line]


def _never_restarted(client: httpx.Client, job_id: str) -> None:
    """Not reaching the store is no failure of the job's: it ran once, to its end."""
    details = client.get(f"/api/v1/jobs/{job_id}").json()
    assert [task["restarts"] for task in details["tasks"]] == [0], details["tasks"]
    assert not [e for e in details["events"] if e["state"] == "restarting"], details["events"]


def _state(client: httpx.Client, job_id: str) -> str:
    response = client.get(f"/api/v1/jobs/{job_id}")
    return str(response.json()["job"]["state"]) if response.status_code == 200 else "?"


HANG = 15.0
"""Seconds the database hangs (its processes stopped)."""


def test_a_database_that_hangs_never_hangs_the_server(
    postgres: PrivatePostgres, tmp_path: Path
) -> None:
    """The database's processes stopped (SIGSTOP) under 16 clients: it accepts connections
    and answers nothing. The call caught holding the connection (on the event loop, maybe)
    has its link cut by the store's watchdog after STATEMENT_WAIT, and no call waits on the
    database after that: /healthz answers all along (in milliseconds once the hang is
    known), /readyz says 503, requests get 503s; once the database goes on, every
    acknowledged job ends as it should, without a restart of trainfleet."""
    from trainfleet.store.connection import STATEMENT_WAIT

    server = _server_on(postgres, tmp_path)
    onset = STATEMENT_WAIT + 2  # the hang is known by then
    slowest_health, not_ready = 0.0, 0
    try:
        client = httpx.Client(base_url=server.url, headers=AUTH, timeout=30)
        with _outage_under_load(client, server) as (long_job, submitter):
            postgres.freeze()
            frozen = time.monotonic()
            try:
                while time.monotonic() < frozen + HANG:  # the long job ends meanwhile
                    asked = time.monotonic()
                    health = client.get("/healthz", timeout=onset + HEALTH_TIMEOUT)
                    assert health.status_code == 200
                    ready = client.get("/readyz", timeout=onset + HEALTH_TIMEOUT)
                    if asked > frozen + onset:
                        slowest_health = max(slowest_health, health.elapsed.total_seconds())
                        assert ready.status_code == 503, ready.text
                        not_ready += 1
                    time.sleep(0.3)
            finally:
                postgres.thaw()
        assert not_ready >= 5 and slowest_health < 1.0, (not_ready, slowest_health)
        assert submitter.statuses[503] > 0, submitter.statuses
        assert set(submitter.statuses) <= {201, 503}, submitter.statuses
        _all_succeeded(client, server, [long_job, *submitter.acknowledged])
        _never_restarted(client, long_job)
    finally:
        server.stop()
