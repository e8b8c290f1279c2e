"""``Client.run`` through a real server: what it refuses before a job is stored, and
what it answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from server.harness import LiveServer, add_user

from trainfleet.client import BadRequest, Client, Forbidden
from trainfleet.domain.errors import BadInput, RemoteError
from trainfleet.domain.records import TeamRole
from trainfleet.spec.functions import PAYLOAD, FunctionCall


@pytest.fixture
def server(tmp_path: Path, reap: Path) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path / "data").start()
    yield live
    live.stop()


def _jobs(server: LiveServer, token: str) -> list[tuple[str, str]]:
    with Client(server.url, token) as client:
        return [(job.name, job.state) for job in client.list_jobs()]


def test_another_python_is_refused_at_submission_naming_both(
    server: LiveServer, tmp_path: Path
) -> None:
    """A job file that says its function was pickled by another Python than the tasks'."""
    member, _ = add_user(server.engine.store, "ivy")
    command = " ".join(FunctionCall("3.9", PAYLOAD).argv())
    text = f"name: old\nroles:\n  worker:\n    command: {command}\n"
    with Client(server.url, member) as client, pytest.raises(BadRequest) as refused:
        client.submit(text)
    assert refused.value.status == 422
    assert "roles.worker: the function was sent from Python 3.9" in str(refused.value)
    assert "environment" in str(refused.value)
    assert _jobs(server, member) == []


def test_a_function_runs_with_its_kwargs_and_a_viewer_may_not_run_one(
    server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    member, _ = add_user(server.engine.store, "ivy")
    viewer, _ = add_user(server.engine.store, "vic", role=TeamRole.VIEWER)
    monkeypatch.chdir(tmp_path)

    def greet(name: str, punctuation: str = ".") -> str:
        return f"hello {name}{punctuation}"

    with Client(server.url, member) as client:
        answer = client.run(greet, "ada", framework="generic", kwargs={"punctuation": "!"})
        assert answer == "hello ada!"
        with pytest.raises(BadInput, match=r"run\(\): no option 'worker'"):
            client.run(greet, "ada", worker=2)
    with Client(server.url, viewer) as client, pytest.raises(Forbidden, match="member"):
        client.run(greet, "ada", framework="generic")
    assert _jobs(server, member) == [("greet", "succeeded")]


def test_a_job_that_ends_without_a_result_says_why(
    server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task killed by a signal leaves no error of its own: the job's reason is said."""
    member, _ = add_user(server.engine.store, "ivy")
    monkeypatch.chdir(tmp_path)

    def vanish() -> None:
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    with Client(server.url, member) as client, pytest.raises(RemoteError) as failed:
        client.run(vanish, framework="generic")
    assert "failed" in str(failed.value) and "SIGKILL" in str(failed.value)


def test_client_needs_a_server_from_its_arguments_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRAINFLEET_SERVER", raising=False)
    with pytest.raises(BadInput, match="url: no server given, and TRAINFLEET_SERVER is not set"):
        Client()
