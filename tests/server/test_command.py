"""``trainfleet server`` as an operator runs it: first start, token, restart, stop."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import process_group_alive, trainfleet, wait_for

from trainfleet.client import Client, NotFound, Unauthorized, Unreachable
from trainfleet.domain.records import State
from trainfleet.server.listening import GRACEFUL_SHUTDOWN

from .harness import ServerProcess

SLEEPER = "name: sleeper\nroles:\n  worker: {command: 'echo up; sleep 60'}\n"


def follow_until_cut(url: str, token: str, job_id: str) -> None:
    with Client(url, token) as client:
        try:
            for _ in client.follow_events(job_id):
                pass
        except Unreachable:
            pass  # the server went away: what a follower of a stopping server sees


def test_first_start_prints_a_token_once_and_a_restart_keeps_jobs_running(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data)
    try:
        token = server.admin_token
        assert token and len(token) >= 40
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        assert httpx.get(f"{server.url}/api/v1/jobs").status_code == 401
        with Client(server.url, token) as client:
            job = client.submit(SLEEPER, server_workdir=tmp_path)
            assert next(client.follow_log(job.id, "worker", 0)) == "up\n"
            pid = client.describe(job.id).tasks[0].pid
            assert pid is not None
        # A client following the job must not hold the server up.
        follower = threading.Thread(target=follow_until_cut, args=(server.url, token, job.id))
        follower.start()
        time.sleep(0.3)
        stopping = time.monotonic()
    finally:
        # uvicorn shuts down cleanly, then re-raises the signal, as a server should.
        assert server.stop() == -signal.SIGTERM
    assert time.monotonic() - stopping < GRACEFUL_SHUTDOWN + 15
    follower.join(timeout=30)
    assert not follower.is_alive()
    server.wait_for_line("Application shutdown complete")
    assert token not in (data / "trainfleet.db").read_bytes().decode(errors="replace")
    assert process_group_alive(pid), "a stopped server leaves its jobs' tasks running"

    again = ServerProcess(data)
    try:
        assert again.admin_token is None  # shown only once
        with Client(again.url, token) as client:
            adopted = client.describe(job.id)
            assert adopted.job.state == State.RUNNING
            assert adopted.tasks[0].pid == pid and adopted.tasks[0].restarts == 0
            client.cancel(job.id)
            ended = client.wait(job.id)
            assert ended.state == State.CANCELLED
        wait_for(lambda: not process_group_alive(pid), 10, "the job's processes to end")
    finally:
        assert again.stop(signal.SIGINT) == 0  # Ctrl-C: a clean stop


def test_the_admin_token_can_come_from_the_environment(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": "a-long-enough-secret"})
    try:
        assert server.admin_token is None
        with Client(server.url, "a-long-enough-secret") as client, pytest.raises(NotFound):
            client.get("no-such-job")  # NotFound: past the token check
        with pytest.raises(Unauthorized):
            Client(server.url, "something-else").find()
    finally:
        server.stop()


def test_a_short_admin_token_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        trainfleet("--data-dir", tmp_path / "data", "server", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TRAINFLEET_ADMIN_TOKEN": "short"},
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: TRAINFLEET_ADMIN_TOKEN is too short to be safe")


def test_the_server_keeps_its_state_in_postgresql(tmp_path: Path, postgres_url: str) -> None:
    from trainfleet.store.database import Store

    env = {
        "TRAINFLEET_ADMIN_TOKEN": "a-long-enough-secret",
        "TRAINFLEET_DATABASE_URL": postgres_url,
    }
    server = ServerProcess(tmp_path / "data", env)
    try:
        with Client(server.url, "a-long-enough-secret") as client:
            job = client.submit(
                "name: on-pg\nroles:\n  worker: {command: echo hi}\n", workdir=tmp_path
            )
            assert client.wait(job.id).state == State.SUCCEEDED
    finally:
        server.stop()
    assert not (tmp_path / "data" / "trainfleet.db").exists(), "no SQLite file beside PostgreSQL"
    with Store.open(postgres_url) as store:
        stored = store.get_job(job.id)
        assert stored is not None and stored.state == State.SUCCEEDED
        assert [t.state for t in store.list_tasks(job.id)] == [State.SUCCEEDED]
