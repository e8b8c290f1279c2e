"""A job's TensorBoard through a real server: a real job writes a scalar with torch's
``SummaryWriter``, the real ``tensorboard`` package serves it as the job's service task,
and the proxy at ``/jobs/<id>/tensorboard/`` answers TensorBoard's scalar API to those who
may read the job, to no one else, and for no path but that job's own."""

from __future__ import annotations

import http.client
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import wait_for

from trainfleet.client import Client
from trainfleet.domain.records import State

from .harness import LiveServer, ServerProcess, add_user

TOKEN = "tensorboard-test-admin-token"

pytest.importorskip("tensorboard")
pytest.importorskip("torch")

WRITER = """\
import os, sys, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(os.environ["TRAINFLEET_TENSORBOARD_DIR"])
for step in range(3):
    writer.add_scalar("loss/train", 0.25 * (step + 1), step)
writer.flush()
print("written", flush=True)
time.sleep(float(sys.argv[1]))
"""
SCALARS = "data/plugin/scalars/scalars?run=.&tag=loss/train"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path / "data").start()
    yield server
    server.stop()


def _job(tmp_path: Path, seconds: float, keep_after: str) -> str:
    (tmp_path / "write.py").write_text(WRITER)
    command = f"{sys.executable} {tmp_path / 'write.py'} {seconds}"
    return (
        f"name: curves\nroles:\n  worker: {{command: '{command}'}}\n"
        f"tensorboard: {{logdir: {tmp_path / 'events'}, keep_after: {keep_after}}}\n"
    )


def _get(live: LiveServer, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(live.url + path, headers=headers, timeout=30)


def _raw(live: LiveServer, path: str, token: str) -> tuple[int, dict[str, Any]]:
    """A request whose path goes out as written (httpx would remove its dot segments)."""
    host, port = live.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        return response.status, httpx.Response(200, content=response.read()).json()
    finally:
        connection.close()


def _scalars(live: LiveServer, job_id: str, token: str) -> list[list[float]] | None:
    response = _get(live, f"/jobs/{job_id}/tensorboard/{SCALARS}", token)
    if response.status_code != 200:
        return None
    values = response.json()
    return values if len(values) == 3 else None


def test_the_proxy_serves_the_jobs_scalars_to_its_readers_only(
    live: LiveServer, tmp_path: Path
) -> None:
    with Client(live.url, live.token, timeout=30) as admin:
        job = admin.submit(_job(tmp_path, 600, "0"))
        other = admin.submit("name: other\nroles:\n  worker: {command: sleep 600}\n")
        try:
            path = f"/jobs/{job.id}/tensorboard/"
            assert [link.path for link in admin.describe(job.id).services] == [path]
            assert admin.describe(other.id).services == []
            found = wait_for(lambda: _scalars(live, job.id, live.token), 60, "the scalars")
            assert [(step, value) for _, step, value in found] == [(0, 0.25), (1, 0.5), (2, 0.75)]
            page = _get(live, path, live.token)
            assert page.status_code == 200 and "<tb-webapp>" in page.text

            admin.create_team("elsewhere")
            outsider, _ = add_user(live.engine.store, "eve", team="elsewhere")
            assert _get(live, f"{path}{SCALARS}", outsider).status_code == 404
            assert _get(live, f"{path}{SCALARS}", None).status_code == 401
            assert _get(live, f"/jobs/{other.id}/tensorboard/", live.token).status_code == 404

            for sneaky in (
                f"/jobs/{job.id}/tensorboard/../../{other.id}/tensorboard/",
                f"/jobs/{other.id}/tensorboard/../../{job.id}/tensorboard/",
                f"/jobs/{job.id}/tensorboard/%2e%2e/%2e%2e/{other.id}/tensorboard/",
                f"/jobs/{job.id}/tensorboard/..%2f..%2f{other.id}/tensorboard/",
                f"/jobs/{job.id}%2ftensorboard/",
                f"/jobs/{job.id}/tensorboardx/",
            ):
                status, body = _raw(live, sneaky, live.token)
                assert status == 404, (sneaky, status, body)

            # A killed TensorBoard fails alone: the job runs on, and the proxy says why.
            tensorboard = next(t for t in admin.describe(job.id).tasks if t.role == "tensorboard")
            assert tensorboard.pid is not None
            os.kill(tensorboard.pid, signal.SIGKILL)
            # Down, not gone, while its job runs: 503 with the state and why, every time.
            wait_for(
                lambda: _get(live, path, live.token).json().get("state") == "failed", 30, "failed"
            )
            for _ in range(3):
                answer = _get(live, path, live.token)
                assert answer.status_code == 503, answer.text
                assert answer.json()["state"] == "failed" and "SIGKILL" in answer.json()["detail"]
            assert admin.get(job.id).state == State.RUNNING
        finally:
            admin.cancel(job.id)
            admin.cancel(other.id)
            admin.wait(job.id)


def test_tensorboard_stays_up_keep_after_then_stops(live: LiveServer, tmp_path: Path) -> None:
    with Client(live.url, live.token, timeout=30) as admin:
        job = admin.submit(_job(tmp_path, 1, "6s"))
        ended = admin.wait(job.id)
        assert ended.state == State.SUCCEEDED
        # The job has ended, its TensorBoard has not: it answers for keep_after.
        found = wait_for(lambda: _scalars(live, job.id, live.token), 30, "the scalars")
        assert found is not None
        service = admin.describe(job.id).services[0]
        assert service.state == State.RUNNING
        pid = next(t.pid for t in admin.describe(job.id).tasks if t.role == "tensorboard")
        wait_for(lambda: admin.describe(job.id).services[0].state.is_final, 30, "its end")
        assert admin.get(job.id).state == State.SUCCEEDED  # its end changed nothing
        assert pid is not None and not _alive(pid)
        answer = _get(live, f"/jobs/{job.id}/tensorboard/", live.token)
        assert answer.status_code == 404 and answer.json()["state"] in ("succeeded", "cancelled")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_restarted_server_adopts_an_ended_jobs_tensorboard_and_stops_it_in_time(
    reap: Path,
) -> None:
    """kill -9 of the server while an ended job's TensorBoard lives on (keep_after): the
    next server adopts it, serves it, and stops it when keep_after ends, as counted from
    the job's end; the job itself stays as it ended."""
    tmp_path = reap
    server = ServerProcess(tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN})
    with Client(server.url, TOKEN, timeout=30) as client:
        job = client.submit(_job(tmp_path, 0, "20s"))
        ended = client.wait(job.id)
        assert ended.state == State.SUCCEEDED and ended.finished_at is not None
        board = next(t for t in client.describe(job.id).tasks if t.role == "tensorboard")
        assert board.state == State.RUNNING and board.pid is not None
    server.process.send_signal(signal.SIGKILL)
    assert server.process.wait(timeout=30) == -signal.SIGKILL
    assert _alive(board.pid)  # supervised: it outlives the server

    again = ServerProcess(tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN})
    try:
        with Client(again.url, TOKEN, timeout=30) as client:
            adopted = next(t for t in client.describe(job.id).tasks if t.role == "tensorboard")
            assert adopted.pid == board.pid and adopted.code == "adopted"
            page = httpx.get(
                f"{again.url}/jobs/{job.id}/tensorboard/",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=30,
            )
            assert page.status_code == 200 and "<tb-webapp>" in page.text
            wait_for(lambda: not _alive(board.pid), 60, "the TensorBoard's end")
            assert time.time() >= ended.finished_at + 20 - 1  # not before keep_after
            stopped = next(t for t in client.describe(job.id).tasks if t.role == "tensorboard")
            assert State(stopped.state).is_final
            assert client.get(job.id).state == State.SUCCEEDED
            assert client.get(job.id).finished_at == ended.finished_at
    finally:
        again.stop()
