"""No secret value stays on disk when a job is stopped as it starts (issue 31): a job with a
secret is cancelled at each step of its start, and then the whole data directory, the
database and every answer of the API are searched for the value (and its base64).

The steps are held up (monkeypatched) in the real engine and backend of a real server in
this process, with real shims and tasks, so that the cancel arrives just there: no real
start can be made to linger at a chosen step on demand.
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import every_answer, wait_for

from trainfleet.backends.launch import JobLaunch
from trainfleet.backends.local import processes
from trainfleet.backends.local.processes import LocalBackend
from trainfleet.client import Client
from trainfleet.control.assembly import engine_at
from trainfleet.control.controller import JobController

from .harness import LiveServer, ServerProcess

VALUE = f"tf-secret-{secrets.token_hex(16)}"
JOB = """\
name: masked
grace_period: 2
env:
  API_KEY: {secret: vault, key: token}
roles:
  worker:
    command: "sh -c 'echo value=$API_KEY; sleep 60'"
    env:
      KEY_FILE: {secret: vault, key: token, file: true}
restart: {policy: never}
"""


class Hold:
    """Holds up a step of a start until the test has sent its cancel."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

    def around(
        self, original: Callable[..., Any], before: Callable[..., None] | None = None
    ) -> Callable[..., Any]:
        """``original``, held at its call until ``go`` (then ``before`` it, if given)."""

        def held(*args: Any, **kwargs: Any) -> Any:
            self.reached.set()
            self.go.wait(30)
            if before is not None:
                before(*args)
            return original(*args, **kwargs)

        return held


def _stopped_before_reading(process: subprocess.Popen[bytes], options: bytes) -> None:
    """A stop that reaches the shim while it starts, before it has read its options."""
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


STEPS: dict[str, Callable[[pytest.MonkeyPatch, Hold], None]] = {
    "secret files": lambda mp, hold: mp.setattr(
        JobLaunch, "write_secret_files", hold.around(JobLaunch.write_secret_files)
    ),
    "folder handed over": lambda mp, hold: mp.setattr(
        JobController, "_hand_over", hold.around(JobController._hand_over)
    ),
    "log and records": lambda mp, hold: mp.setattr(
        LocalBackend, "_make_room", staticmethod(hold.around(LocalBackend._make_room))
    ),
    "shim started, options not sent": lambda mp, hold: mp.setattr(
        processes, "_send", hold.around(processes._send)
    ),
    "shim stopped before reading its options": lambda mp, hold: mp.setattr(
        processes, "_send", hold.around(processes._send, _stopped_before_reading)
    ),
    "task started": lambda mp, hold: mp.setattr(
        JobController, "_mark_running", hold.around(JobController._mark_running)
    ),
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path / "data", engine_at(tmp_path / "data", supervised=True, vault=True))
    live.start()
    with Client(live.url, live.token) as admin:
        admin.create_secret("vault", {"token": VALUE}, team="default")
    yield live
    live.stop()


@pytest.mark.parametrize("step", [*STEPS, "queued", "running"])
def test_a_job_cancelled_at_any_step_of_its_start_leaves_no_secret_value(
    step: str, server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = Hold()
    if step in STEPS:
        STEPS[step](monkeypatch, hold)
    with Client(server.url, server.token, timeout=60) as admin:
        job = admin.submit(JOB)
        if step in STEPS:
            assert hold.reached.wait(30), f"the start never reached {step}"
            cancel = threading.Thread(target=admin.cancel, args=(job.id,))
            cancel.start()
            time.sleep(0.3)  # the cancel is in
            hold.go.set()
            cancel.join(60)
        else:
            if step == "running":
                log = server.engine.data_dir.log_path(job.id, "worker", 0)
                wait_for(lambda: b"value=***" in _read(log), timeout=60, what="the task's output")
            admin.cancel(job.id)
        assert admin.wait(job.id).state == "cancelled"
        wait_for(lambda: not _processes_of(job.id), timeout=30, what="the job's processes gone")
        wait_for(lambda: _ended(admin, job.id), timeout=30, what="every task ended")
        answers = every_answer(server.url, server.token, job.id, missing_ok=True)
    data = tmp_path / "data"
    for value in (VALUE.encode(), base64.b64encode(VALUE.encode())):
        assert value not in answers
        for path in data.rglob("*"):
            if path.is_file():
                assert value not in path.read_bytes(), (step, path)
        with sqlite3.connect(data / "trainfleet.db") as db:
            assert value.decode() not in "\n".join(db.iterdump())


def test_a_server_start_removes_the_mask_files_earlier_versions_left(tmp_path: Path) -> None:
    """Earlier versions left ``<record>.mask`` (the values in base64) where an attempt was
    stopped before its shim read it; a server start removes them, and only them."""
    run = tmp_path / "data" / "jobs" / "masked-0123abcd" / "run"
    run.mkdir(parents=True)
    left = run / "worker-0-0.mask"
    left.write_bytes(base64.b64encode(VALUE.encode()) + b"\n")
    (run / "worker-0-0.exit").write_text("-15")
    server = ServerProcess(tmp_path / "data")
    try:
        assert not left.exists()
        assert (run / "worker-0-0.exit").read_text() == "-15"
    finally:
        server.stop()


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def _ended(admin: Client, job_id: str) -> bool:
    return all(task.state in ("cancelled", "failed") for task in admin.describe(job_id).tasks)


def _processes_of(job_id: str) -> list[int]:
    """Processes of the job's attempts (their mark names the job's records)."""
    mark = f"/jobs/{job_id}/run/".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if mark in environ:
                found.append(int(entry.name))
    return found
