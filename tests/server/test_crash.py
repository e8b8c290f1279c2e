"""The server is killed with kill -9 while five jobs run; started again, it finishes them.

Each job meets a different fate while no server runs (see tests/crashjobs.py). After the
restart every job ends in the right state with the right exit code, no attempt of a task
ran twice, and no process of any job is left.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from crashjobs import EXPECTED_STARTS, starts, write_jobs
from helpers import process_group_alive, wait_for

from trainfleet.client import Client
from trainfleet.domain.records import State

from .harness import ServerProcess

TOKEN = "crash-test-admin-token"


def test_kill_9_of_the_server_loses_no_job(reap: Path) -> None:
    tmp_path = reap
    data = tmp_path / "data"
    env = {"TRAINFLEET_ADMIN_TOKEN": TOKEN}
    server = ServerProcess(data, env)
    with Client(server.url, TOKEN) as client:
        ids = {
            path.stem: client.submit(
                path.read_text(), server_workdir=tmp_path, filename=path.name
            ).id
            for path in write_jobs(tmp_path)
        }
        wait_for(
            lambda: all((tmp_path / f"journal-{n}").exists() for n in EXPECTED_STARTS),
            what="every task to start",
        )
        before = {name: client.describe(job_id).tasks for name, job_id in ids.items()}
    server.process.send_signal(signal.SIGKILL)
    assert server.process.wait(timeout=30) == -signal.SIGKILL

    # While no server runs: one task ends well, one fails, one is killed.
    (tmp_path / "go-1").touch()
    (tmp_path / "go-2").touch()
    os.kill(int((tmp_path / "journal-3").read_text().split()[2]), signal.SIGKILL)
    wait_for(lambda: "end" in (tmp_path / "journal-2").read_text(), what="ends-bad to end")
    (tmp_path / "go-3").touch()

    again = ServerProcess(data, env)
    try:
        again.wait_for_line("resumed 5 unfinished job(s)")
        with Client(again.url, TOKEN) as client:
            adopted = client.describe(ids["adopted"]).tasks[0]
            assert adopted.state == State.RUNNING and adopted.pid == before["adopted"][0].pid
            (tmp_path / "go-4").touch()
            (tmp_path / "go-5").touch()
            final = {name: client.wait(job_id) for name, job_id in ids.items()}
            details = {name: client.describe(job_id) for name, job_id in ids.items()}
    finally:
        again.stop()

    assert {name: job.state for name, job in final.items()} == {
        "ends-ok": State.SUCCEEDED,
        "ends-bad": State.FAILED,
        "killed": State.SUCCEEDED,
        "adopted": State.SUCCEEDED,
        "with-ps": State.SUCCEEDED,
    }
    assert final["ends-bad"].reason == "worker/0 exited with exit code 3 after 2 restart(s)"
    assert details["ends-ok"].tasks[0].exit_code == 0
    assert details["killed"].tasks[0].restarts == 1
    assert starts(tmp_path) == EXPECTED_STARTS, "every attempt ran once, none twice"
    for name, job in details.items():
        for task in [*before[name], *job.tasks]:
            assert task.pid is not None and not process_group_alive(task.pid)
