"""kill -9 of the server while a task runs in a container: started again, the server adopts
the container, or, when the task's shim was killed too, ends the container before the next
attempt. No container of the job is left once it has ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from container_images import base_image
from helpers import wait_for

from trainfleet.client import Client
from trainfleet.domain.records import State, TaskRecord

from .harness import ServerProcess

TOKEN = "container-crash-admin-token-0123456789"
ENV = {"TRAINFLEET_ADMIN_TOKEN": TOKEN}
# Notes each start (with its container's hostname), then waits for "go".
TASK = 'echo "start $(hostname)" >> journal; while [ ! -e go ]; do sleep 0.1; done; echo done'


def containers(job_id: str) -> list[str]:
    """Names of the containers of ``job_id``, running or not."""
    listed = subprocess.run(
        ["podman", "ps", "-a", "--filter", f"name=trainfleet-{job_id}-", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def _submit(client: Client, folder: Path, image: str) -> str:
    job = {
        "name": "boxed",
        "grace_period": 1,
        "image": image,
        "restart": {"policy": "on-failure", "max_restarts": 2, "backoff": {"initial": 0}},
        "roles": {"worker": {"command": ["sh", "-c", TASK]}},
    }
    return client.submit(json.dumps(job), server_workdir=folder).id


def _start_then_kill_the_server(folder: Path) -> tuple[str, TaskRecord]:
    """Submit the job, wait for its container, kill -9 the server: the job's id and task."""
    server = ServerProcess(folder / "data", ENV)
    with Client(server.url, TOKEN) as client:
        job_id = _submit(client, folder, base_image())
        wait_for(lambda: _starts(folder), what="the container to start")
        task = client.describe(job_id).tasks[0]
    server.stop(signal.SIGKILL)
    return job_id, task


def _starts(folder: Path) -> list[str]:
    journal = folder / "journal"
    return journal.read_text().splitlines() if journal.exists() else []


def test_a_restarted_server_adopts_a_running_container(reap: Path) -> None:
    job_id, before = _start_then_kill_the_server(reap)
    assert containers(job_id), "the container outlives the server"

    again = ServerProcess(reap / "data", ENV)
    try:
        again.wait_for_line("resumed 1 unfinished job(s)")
        with Client(again.url, TOKEN) as client:
            adopted = client.describe(job_id).tasks[0]
            assert (adopted.state, adopted.pid) == (State.RUNNING, before.pid)
            (reap / "go").touch()
            assert client.wait(job_id).state == State.SUCCEEDED
            assert client.read_log(job_id, "worker", 0).endswith(b"done\n")
    finally:
        again.stop()
    assert len(_starts(reap)) == 1, "adopted, not started again"
    wait_for(lambda: not containers(job_id), timeout=30, what="the container to be removed")


def test_a_container_whose_shim_was_killed_ends_before_the_next_attempt(reap: Path) -> None:
    job_id, task = _start_then_kill_the_server(reap)
    shim = task.pid
    assert shim is not None
    os.kill(shim, signal.SIGKILL)  # the runtime's client goes with it; the container not
    assert containers(job_id), "the container outlives its shim"

    again = ServerProcess(reap / "data", ENV)
    try:
        wait_for(lambda: len(_starts(reap)) >= 2, timeout=60, what="the second attempt")
        with Client(again.url, TOKEN) as client:
            task = client.describe(job_id).tasks[0]
            assert (task.state, task.restarts) == (State.RUNNING, 1)
            assert len(containers(job_id)) == 1, "the first attempt's container has ended"
            (reap / "go").touch()
            assert client.wait(job_id).state == State.SUCCEEDED
    finally:
        again.stop()
    wait_for(lambda: not containers(job_id), timeout=30, what="the containers to be removed")
