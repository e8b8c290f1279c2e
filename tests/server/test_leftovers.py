"""No process of a task's attempt outlives it: not when the server and the task's shim were
killed with kill -9, and not one that left the task's process group with ``setsid``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
from helpers import wait_for

from trainfleet.client import Client
from trainfleet.domain.records import State

from .harness import ServerProcess

TOKEN = "leftovers-test-admin-token"

# Listens on its port (a second attempt beside it could not), starts a sleeper in a
# session of its own, writes both pids to the journal, and waits.
TASK = textwrap.dedent(
    """
    import os, socket, subprocess, sys, time
    server = socket.socket()
    server.bind(("127.0.0.1", int(os.environ["TRAINFLEET_PORT"])))
    server.listen()
    escaped = subprocess.Popen(["sleep", "600"], start_new_session=True)
    with open(sys.argv[1], "a") as journal:
        journal.write(f"{os.getpid()} {escaped.pid}\\n")
    time.sleep(600)
    """
)


def attempts(journal: Path) -> list[list[int]]:
    """The pids of each attempt's task and of its escaped sleeper, in order of start."""
    if not journal.exists():
        return []
    return [[int(pid) for pid in line.split()] for line in journal.read_text().splitlines()]


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie awaiting its reaper has ended)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_an_attempt_whose_shim_was_killed_is_ended_before_the_next(reap: Path) -> None:
    """kill -9 of the server and of the task's shim, then a new server: the old attempt
    (task and escaped sleeper) is gone once the new attempt runs, and ``stop`` leaves none.

    Before, the old task kept its port beside the new attempts, which failed on it, and the
    sleepers of every attempt outlived the job.
    """
    program, journal = reap / "task.py", reap / "journal"
    program.write_text(TASK)
    job = {
        "name": "leftovers",
        "grace_period": 1,
        "restart": {"policy": "on-failure", "max_restarts": 3},
        "roles": {"worker": {"command": ["python", str(program), str(journal)]}},
    }
    env = {"TRAINFLEET_ADMIN_TOKEN": TOKEN}
    server = ServerProcess(reap / "data", env)
    try:
        with Client(server.url, TOKEN) as client:
            job_id = client.submit(json.dumps(job), server_workdir=reap).id
            wait_for(lambda: attempts(journal), what="the task to start")
            shim = client.describe(job_id).tasks[0].pid
    finally:
        server.stop(signal.SIGKILL)
    assert shim is not None
    os.kill(shim, signal.SIGKILL)
    [first] = attempts(journal)
    assert all(running(pid) for pid in first), "the task outlives its shim"

    again = ServerProcess(reap / "data", env)
    try:
        wait_for(lambda: len(attempts(journal)) >= 2, what="the second attempt to start")
        assert not [pid for pid in first if running(pid)], "the first attempt still runs"
        with Client(again.url, TOKEN) as client:
            task = client.describe(job_id).tasks[0]
            assert (task.state, task.restarts) == (State.RUNNING, 1)
            stop = subprocess.run(
                [sys.executable, "-m", "trainfleet", "stop", job_id],
                env={**os.environ, "TRAINFLEET_SERVER": again.url, "TRAINFLEET_TOKEN": TOKEN},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert stop.returncode == 0, stop.stderr
            assert client.wait(job_id).state == State.CANCELLED
    finally:
        again.stop()
    left = [pid for attempt in attempts(journal) for pid in attempt if running(pid)]
    assert not left, f"processes of the job outlived it: {left}"
    assert len(attempts(journal)) == 2, "every later attempt ran once the old one was gone"
