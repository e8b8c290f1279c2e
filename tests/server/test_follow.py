"""Following a job's log and events: streams end when their token is revoked."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import httpx
import pytest
from helpers import wait_for

from trainfleet.client import Client, Unauthorized
from trainfleet.wire import API_PREFIX

from .harness import LiveServer, ServerProcess, add_user

SLEEPER = "name: sleeper\ngrace_period: 1\nroles:\n  worker: {command: 'echo up; sleep 600'}\n"
BIG_LOG = "name: big\nroles:\n  worker: {command: 'cat big.log'}\n"


def test_revoking_a_token_ends_its_open_streams(live: LiveServer, client: Client) -> None:
    """Streams opened before the revocation close within a few seconds, the job running on."""
    token, record = add_user(live.engine.store, "carol")
    job = client.submit(SLEEPER)
    assert next(client.follow_log(job.id, "worker", 0)) == "up\n"
    paths = [f"/jobs/{job.id}/tasks/worker/0/log/follow", f"/jobs/{job.id}/events/follow"]
    opened = threading.Barrier(len(paths) + 1, timeout=30)
    ended: list[str] = []

    def follow(path: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        timeout = httpx.Timeout(30, read=None)
        with httpx.stream(
            "GET", f"{live.url}{API_PREFIX}{path}", headers=headers, timeout=timeout
        ) as response:
            assert response.status_code == 200
            opened.wait()
            for _ in response.iter_bytes():
                pass
        ended.append(path)

    followers = [threading.Thread(target=follow, args=(path,), daemon=True) for path in paths]
    try:
        for follower in followers:
            follower.start()
        opened.wait()
        assert live.engine.store.revoke_token(record.id)
        for follower in followers:
            follower.join(timeout=20)  # generous: a stream ends about 1 s after revocation
        assert sorted(ended) == sorted(paths)
        assert client.get(job.id).state == "running"
        with Client(live.url, token) as carol, pytest.raises(Unauthorized):
            list(carol.follow_log(job.id, "worker", 0))
    finally:
        client.cancel(job.id)


def _open_on(path: Path, pid: int | str = "self") -> int:
    """How many file descriptors of process ``pid`` (by default this one, the live
    server's) are open on ``path``."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd) == str(path)
    return count


def test_many_followers_of_a_log_share_one_reader(live: LiveServer, client: Client) -> None:
    """20 streams of one log hold one open file, which closes when the last one leaves."""
    job = client.submit(SLEEPER)
    log = live.engine.log_path(job.id, "worker", 0)
    url = f"{live.url}{API_PREFIX}/jobs/{job.id}/tasks/worker/0/log/follow"
    headers = {"Authorization": f"Bearer {live.token}"}
    try:
        with contextlib.ExitStack() as streams:
            readers = []  # kept: a line iterator collected closes its stream
            for _ in range(20):
                response = streams.enter_context(
                    httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(30))
                )
                readers.append(lines := response.iter_lines())
                assert next(line for line in lines if line.startswith("data:"))  # "up"
            assert _open_on(log, live.api_pid) == 1
        wait_for(lambda: _open_on(log, live.api_pid) == 0, what="the log's reader closed")
    finally:
        client.cancel(job.id)


def test_followers_that_leave_mid_stream_leave_no_error_in_the_server_log(
    tmp_path: Path,
) -> None:
    """Followers that hang up in the middle of a big log are normal: their streams end
    (the log is closed) and the server's own output (a real ``trainfleet server``) holds
    no ERROR and no traceback."""
    (tmp_path / "big.log").write_bytes((b"y" * 99 + b"\n") * 80_000)
    server = ServerProcess(tmp_path / "data")
    try:
        token = server.admin_token or ""
        with Client(server.url, token, timeout=30) as client:
            job = client.submit(BIG_LOG, server_workdir=tmp_path)
            client.wait(job.id)
        url = f"{server.url}{API_PREFIX}/jobs/{job.id}/tasks/worker/0/log/follow"
        headers = {"Authorization": f"Bearer {token}"}
        for _ in range(5):
            with httpx.stream("GET", url, headers=headers, timeout=30) as response:
                assert response.status_code == 200
                assert next(response.iter_bytes()).startswith(b"event: log")
        log = tmp_path / "data" / "jobs" / job.id / "logs" / "worker-0.log"
        assert log.stat().st_size == 8_000_000  # far more than one answer holds
        wait_for(lambda: _open_on(log, server.process.pid) == 0, what="the streams' end")
    finally:
        server.stop()
    output = "\n".join(server.lines)
    assert "ERROR" not in output and "Traceback" not in output, output
