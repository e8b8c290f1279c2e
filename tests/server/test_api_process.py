"""``trainfleet server``: the API in a process of its own, beside the engine's (unless
``--one-process``), against a real server. Every kind of change made through the API is
kept (the API's process has a read-only store: a write it made itself would fail the
request); a ``kill -9`` of the API's process loses no job and a new one serves on the same
port; a ``kill -9`` of the engine's process ends the API's, and the next server adopts the
jobs; an API process that keeps dying stops the server, saying so; SIGTERM ends both, jobs
running on."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from helpers import wait_for

from trainfleet.client import Client
from trainfleet.domain.errors import Unavailable
from trainfleet.server.api_supervisor import RESTARTS
from trainfleet.wire import QueueBody, UserBody

from .harness import ServerProcess, ready

ADMIN = "api-process-admin-token-0123456789abcdef"
SLEEPER = "name: sleeper\ngrace_period: 1\nroles:\n  worker: {command: sleep 600}\n"
QUICK = "name: quick\nroles:\n  worker: {command: 'echo done'}\n"
FLOW = """\
kind: Workflow
name: two
steps:
  first: {job: {roles: {worker: {command: "echo first"}}}}
  second: {job: {roles: {worker: {command: "echo second"}}}, needs: [first]}
"""


def _server(data: Path) -> ServerProcess:
    env = {"TRAINFLEET_ADMIN_TOKEN": ADMIN}
    return ServerProcess(data, env=env)  # the API's process: the default


@pytest.fixture
def server(reap: Path) -> Iterator[ServerProcess]:
    process = _server(reap / "data")
    try:
        yield process
    finally:
        process.stop(signal.SIGKILL)
        for child in _api_processes(process.process.pid):
            child.kill()


def _api_processes(server_pid: int) -> list[psutil.Process]:
    """The API's processes the server ``server_pid`` started (one, or none)."""
    try:
        children = psutil.Process(server_pid).children()
    except psutil.NoSuchProcess:
        return []
    return [child for child in children if _is_api_process(child)]


def _is_api_process(process: psutil.Process) -> bool:
    """Whether it is a live API process (one just killed may be gone as it is asked)."""
    try:
        return "trainfleet.server.api_process" in " ".join(process.cmdline())
    except psutil.NoSuchProcess:  # ZombieProcess too
        return False


def _api_pid(server: ServerProcess) -> int:
    found = wait_for(lambda: _api_processes(server.process.pid), 30, "the API's process")
    assert isinstance(found, list) and len(found) == 1
    return int(found[0].pid)


def _client(server: ServerProcess, token: str = ADMIN) -> Client:
    return Client(server.url, token, timeout=30)


def test_every_kind_of_change_made_through_the_api_s_process_is_kept(
    server: ServerProcess, tmp_path: Path
) -> None:
    with _client(server) as admin:
        admin.create_team("vision")
        ana = admin.create_user(UserBody(name="ana", team="vision")).token
        admin.put_queue("vision-q", QueueBody(team="vision"))
        with _client(server, ana) as client:
            client.create_secret("key", {"k": "v"}, team="vision")
            token = client.create_token("laptop")
            job = client.submit(QUICK.replace("quick", "mine") + "queue: vision-q\n")
            assert client.wait(job.id).state == "succeeded"
            assert b"done" in client.read_log(job.id, "worker", 0)
            sleeper = client.submit(SLEEPER)
            wait_for(lambda: client.get(sleeper.id).state == "running", 30, "a running job")
            assert client.cancel(sleeper.id).id == sleeper.id
            assert client.wait(sleeper.id).state == "cancelled"
            client.delete(sleeper.id)
            client.revoke_token(token.token.id)
            assert [(s.team, s.name) for s in client.secrets()] == [("vision", "key")]
        flow = tmp_path / "flow" / "flow.yaml"  # its folder is sent: not the server's data
        flow.parent.mkdir()
        flow.write_text(FLOW)
        submitted = admin.submit_workflow(flow)
        assert submitted.run is not None
        run = admin.wait_run(submitted.run.id, 0.1)
        assert run.run.state == "succeeded"
        assert {step.step: step.state for step in run.steps} == {
            "first": "succeeded",
            "second": "succeeded",
        }
        actions = {record.action for record in admin.audit(limit=1000)}
        assert {"team.create", "user.create", "secret.create", "job.submit"} <= actions
        assert [j.id for j in admin.list_jobs(name="sleeper")] == []
    assert not [line for line in server.lines if "Traceback" in line or " 500 " in line]


@pytest.mark.parametrize(
    ("args", "env", "api_processes"),
    [
        ([], {"TRAINFLEET_API_PROCESS": ""}, 1),
        (["--one-process"], {}, 0),
        ([], {"TRAINFLEET_API_PROCESS": "0"}, 0),
        (["--api-process"], {"TRAINFLEET_API_PROCESS": "0"}, 1),
    ],
    ids=["default", "--one-process", "variable 0", "flag over variable"],
)
def test_the_api_has_a_process_of_its_own_unless_told_otherwise(
    reap: Path, args: list[str], env: dict[str, str], api_processes: int
) -> None:
    server = ServerProcess(reap / "data", env={"TRAINFLEET_ADMIN_TOKEN": ADMIN, **env}, args=args)
    try:
        with _client(server) as client:
            assert client.wait(client.submit(QUICK).id).state == "succeeded"
        assert len(_api_processes(server.process.pid)) == api_processes
    finally:
        server.stop()


def test_a_killed_api_process_is_replaced_and_no_job_is_lost(server: ServerProcess) -> None:
    with _client(server) as client:
        sleeper = client.submit(SLEEPER)
        wait_for(lambda: client.get(sleeper.id).state == "running", 30, "a running job")
        first = _api_pid(server)
        os.kill(first, signal.SIGKILL)  # its open connections end with it
    with _client(server) as client:  # at once: the socket stays open, the next one answers
        assert client.get(sleeper.id).state == "running"
        assert _api_pid(server) != first
        assert client.wait(client.submit(QUICK).id).state == "succeeded"
        client.cancel(sleeper.id)
    server.wait_for_line("the API's process ended (exit status -9): starting another")


def test_an_api_process_killed_amid_submissions_leaves_every_job_whole(
    server: ServerProcess,
) -> None:
    """Four clients submit without pause while the API's process is killed: each
    submission is stored once and runs to its end (one whose answer the kill lost is sent
    again with its Idempotency-Key, and answered with the job it stored, if it did), no
    job is stored without its task or left waiting, and the next API process takes the
    rest."""
    answered: list[str] = []
    unanswered: list[BaseException] = []  # past the client's patience: stored or not
    failures: list[BaseException] = []
    stop = threading.Event()

    def submit_until_stopped() -> None:
        with _client(server) as client:
            while not stop.is_set():
                try:
                    answered.append(client.submit(QUICK).id)
                except Unavailable as error:  # the next API process came too late
                    unanswered.append(error)
                except BaseException as error:
                    failures.append(error)
                    return

    clients = [threading.Thread(target=submit_until_stopped) for _ in range(4)]
    for thread in clients:
        thread.start()
    try:
        wait_for(lambda: len(answered) >= 20, 60, "the first submissions")
        os.kill(_api_pid(server), signal.SIGKILL)
        before = len(answered)
        wait_for(lambda: len(answered) >= before + 20, 60, "submissions to the next process")
    finally:
        stop.set()
        for thread in clients:
            thread.join(60)
    assert failures == []
    with _client(server) as client:
        stored = {job.id for job in client.list_jobs(name="quick")}
        assert set(answered) <= stored and len(set(answered)) == len(answered)
        assert len(stored - set(answered)) <= len(unanswered), "a submission stored twice"
        wait_for(
            lambda: {job.state for job in client.list_jobs(name="quick")} == {"succeeded"},
            120,
            "every stored job run to its end",
        )
        assert all(len(client.describe(job_id).tasks) == 1 for job_id in stored)
    assert not [line for line in server.lines if "Traceback" in line or " 500 " in line]


def test_a_killed_engine_process_ends_the_api_s_and_the_next_server_adopts_the_jobs(
    reap: Path,
) -> None:
    first = _server(reap / "data")
    with _client(first) as client:
        sleeper = client.submit(SLEEPER)
        wait_for(lambda: client.get(sleeper.id).state == "running", 30, "a running job")
    api = psutil.Process(_api_pid(first))
    first.stop(signal.SIGKILL)
    api.wait(timeout=30)  # its door closed: it ends by itself
    second = _server(reap / "data")
    try:
        with _client(second) as client:
            wait_for(lambda: ready(second.url), 60, "the jobs picked up")
            assert client.get(sleeper.id).state == "running"
            assert client.cancel(sleeper.id).id == sleeper.id
            assert client.wait(sleeper.id).state == "cancelled"
    finally:
        second.stop()


def test_an_api_process_that_keeps_dying_stops_the_server_saying_so(
    server: ServerProcess,
) -> None:
    for _ in range(RESTARTS):
        os.kill(_api_pid(server), signal.SIGKILL)
        wait_for(
            lambda: server.process.poll() is not None or _api_processes(server.process.pid),
            30,
            "the next API process, or the end",
        )
        time.sleep(0.2)
    assert server.process.wait(timeout=60) == 1
    server.wait_for_line(f"error: the API's process ended {RESTARTS} times within 60 s")


def test_sigterm_ends_both_processes_and_the_jobs_run_on(server: ServerProcess) -> None:
    with _client(server) as client:
        sleeper = client.submit(SLEEPER)
        wait_for(lambda: client.get(sleeper.id).state == "running", 30, "a running job")
        pid = client.describe(sleeper.id).tasks[0].pid
    api = psutil.Process(_api_pid(server))
    assert server.stop(signal.SIGTERM) == -signal.SIGTERM  # as a one-process server ends
    assert not api.is_running()
    assert pid is not None and psutil.pid_exists(pid)  # the fixture's reap ends it
