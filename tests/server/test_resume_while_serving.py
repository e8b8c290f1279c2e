"""A server restarted after kill -9 serves while it picks its jobs up: /healthz answers at
once, /readyz says not ready until every running task is adopted, reads are served, and a
request that stops a job waits until the jobs are picked up (it never sees a half-resumed
engine)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from helpers import killed_sim_engine, wait_for

from trainfleet.client import Client
from trainfleet.domain.records import State

from .harness import ServerProcess

HERE = Path(__file__).resolve().parent
GATED_SERVER = HERE / "gated_resume_server.py"
TOKEN = "resume-while-serving-admin-token"


def _gated_server(tmp_path: Path, gate: Path) -> ServerProcess:
    return ServerProcess(
        tmp_path / "data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN}, program=(str(GATED_SERVER), str(gate))
    )


def test_a_restarted_server_answers_before_its_jobs_are_picked_up(tmp_path: Path) -> None:
    forever, _, _ = killed_sim_engine(tmp_path / "data")
    gate = tmp_path / "gate"
    server = _gated_server(tmp_path, gate)
    try:
        with Client(server.url, TOKEN, timeout=30) as client:
            assert httpx.get(f"{server.url}/healthz").status_code == 200
            ready = httpx.get(f"{server.url}/readyz")
            assert ready.status_code == 503, ready.text
            assert "picking up the unfinished jobs" in ready.json()["detail"]
            assert client.get(forever).state == State.RUNNING  # reads are served meanwhile

            cancelled: list[State] = []
            cancel = threading.Thread(
                target=lambda: cancelled.append(State(client.cancel(forever).state))
            )
            cancel.start()
            time.sleep(1.0)
            assert cancel.is_alive(), "a cancel went through while the jobs were picked up"
            assert httpx.get(f"{server.url}/readyz").status_code == 503

            gate.touch()
            wait_for(
                lambda: httpx.get(f"{server.url}/readyz").status_code == 200,
                timeout=30,
                what="/readyz: 200",
            )
            adopted = [e.code for e in client.events(forever) if e.task]
            assert "adopted" in adopted, f"ready before its task was adopted: {adopted}"
            server.wait_for_line("resumed 3 unfinished job(s)")
            cancel.join(timeout=30)
            assert cancelled, "the cancel never returned"
            assert client.wait(forever).state == State.CANCELLED
    finally:
        gate.touch()
        server.stop()


def test_a_server_whose_jobs_cannot_be_picked_up_stops(tmp_path: Path) -> None:
    """As it did when it picked them up before it served: it serves nothing it cannot
    follow, and says why."""
    killed_sim_engine(tmp_path / "data")
    gate = tmp_path / "gate"
    server = _gated_server(tmp_path, gate)
    try:
        assert httpx.get(f"{server.url}/readyz").status_code == 503
        written = tmp_path / "gate.new"
        written.write_text("fail")
        written.rename(gate)  # whole: the backend never reads it half-written
        assert server.process.wait(timeout=60) == 2, "\n".join(server.lines)
    finally:
        server.stop()
    assert any("error: the simulated engine is gone" in line for line in server.lines)
