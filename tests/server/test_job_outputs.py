"""A job's outputs through a live server: a real job's task writes ``$TRAINFLEET_OUTPUT_DIR``
(a result, and a link to ``/etc/shadow``, a FIFO, a folder, a hidden file), read back
through the REST API, the SDK and the CLI (``trainfleet logs JOB --output``). Only the
result is an output; the rest is refused or left out, never followed, and nothing
answers 500 or hangs. Another team's member cannot see the outputs, as with logs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from helpers import run_cli, trainfleet

from trainfleet.client import BadRequest, Client, NotFound
from trainfleet.domain.records import State, TeamRole
from trainfleet.wire import API_PREFIX

from .harness import LiveServer, add_user, raw_status

RESULT = b"forty-two\x00\xff\n"
JOB = r"""
name: outputs
queue: vision
roles:
  worker:
    command: >-
      cd "$TRAINFLEET_OUTPUT_DIR" && printf 'forty-two\000\377\n' > result.txt
      && ln -s /etc/shadow evil && mkfifo pipe && mkdir sub && echo in > sub/inner.txt
      && echo dot > .hidden
"""


@dataclass
class Ended:
    """The live server, its ended job, and tokens of a member, a viewer and a stranger."""

    server: LiveServer
    job_id: str
    member: str
    viewer: str
    stranger: str

    def url(self, suffix: str = "") -> str:
        return f"{self.server.url}{API_PREFIX}/jobs/{self.job_id}/outputs{suffix}"


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ended]:
    server = LiveServer(tmp_path_factory.mktemp("outputs") / "data").start()
    try:
        with Client(server.url, server.token) as admin:
            admin.create_team("vision")
            admin.create_team("audio")
        store = server.engine.store
        member, _ = add_user(store, "mia", "vision")
        viewer, _ = add_user(store, "vic", "vision", TeamRole.VIEWER)
        stranger, _ = add_user(store, "sam", "audio")
        with Client(server.url, member, timeout=30) as client:
            job = client.submit(JOB)
            done = client.wait(job.id)
            assert done.state == State.SUCCEEDED, client.read_log(job.id, "worker", 0)
        yield Ended(server, job.id, member, viewer, stranger)
    finally:
        server.stop()


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.timeout(60)
def test_the_rest_api_lists_and_streams_the_outputs(ended: Ended) -> None:
    listed = httpx.get(ended.url(), headers=_headers(ended.member), timeout=30)
    assert listed.status_code == 200
    assert [(o["name"], o["size"]) for o in listed.json()] == [("result.txt", len(RESULT))]
    assert listed.json()[0]["modified"] > 0
    read = httpx.get(ended.url("/result.txt"), headers=_headers(ended.viewer), timeout=30)
    assert read.status_code == 200 and read.content == RESULT
    assert read.headers["content-type"] == "application/octet-stream"
    assert read.headers["content-length"] == str(len(RESULT))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("tail", "status"),
    [
        ("evil", 404),  # a link to /etc/shadow
        ("pipe", 404),  # a FIFO: never opened, so never waited on
        ("sub", 404),
        ("nothing.txt", 404),
        (".hidden", 422),
        ("sub/inner.txt", 422),
        ("a%2Fb", 422),
        ("..%2Fevil", 422),
        ("%2E%2E", 422),
        ("%00x", 422),
    ],
)
def test_what_is_no_output_is_refused_never_followed(ended: Ended, tail: str, status: int) -> None:
    path = f"{API_PREFIX}/jobs/{ended.job_id}/outputs/{tail}"
    assert raw_status(ended.server.url, path, ended.member) == status  # sent as written


@pytest.mark.timeout(60)
def test_a_refusal_names_the_outputs_or_the_rule(ended: Ended) -> None:
    missing = httpx.get(ended.url("/evil"), headers=_headers(ended.member), timeout=30)
    assert missing.json()["detail"] == (
        f"job {ended.job_id} has no output 'evil' (outputs: result.txt)"
    )
    bad = httpx.get(ended.url("/.hidden"), headers=_headers(ended.member), timeout=30)
    assert "should match pattern" in bad.json()["detail"], bad.json()


@pytest.mark.timeout(60)
def test_the_sdk_reads_the_outputs(ended: Ended) -> None:
    with Client(ended.server.url, ended.member, timeout=30) as client:
        (found,) = client.job_outputs(ended.job_id)
        assert (found.name, found.size) == ("result.txt", len(RESULT))
        assert client.job_output(ended.job_id, "result.txt") == RESULT
        with pytest.raises(NotFound, match=r"no output 'evil' \(outputs: result.txt\)"):
            client.job_output(ended.job_id, "evil")
        for name in ("../evil", "a/b", "..", ".", ""):
            with pytest.raises(BadRequest):
                client.job_output(ended.job_id, name)


@pytest.mark.timeout(60)
def test_another_teams_member_sees_no_outputs(ended: Ended) -> None:
    for suffix in ("", "/result.txt", "/evil"):
        answer = httpx.get(ended.url(suffix), headers=_headers(ended.stranger), timeout=30)
        assert answer.status_code == 404, answer.text
        assert "result.txt" not in answer.text and RESULT not in answer.content
    with Client(ended.server.url, ended.stranger, timeout=30) as client:
        with pytest.raises(NotFound):
            client.job_outputs(ended.job_id)
        with pytest.raises(NotFound):
            client.job_output(ended.job_id, "result.txt")
    no_token = httpx.get(ended.url("/result.txt"), timeout=30)
    assert no_token.status_code == 401


@pytest.mark.timeout(120)
def test_the_cli_lists_and_prints_the_outputs_through_the_server(
    ended: Ended, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("TRAINFLEET_SERVER", ended.server.url)
    monkeypatch.setenv("TRAINFLEET_TOKEN", ended.member)
    listed = run_cli("logs", ended.job_id, "--output")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0] == ["NAME", "SIZE", "MODIFIED"] and rows[1][:3] == [
        "result.txt",
        str(len(RESULT)),
        "B",
    ]
    assert len(rows) == 2
    printed = _cli_bytes("logs", ended.job_id, "--output", "result.txt")
    assert printed == RESULT
    for name, words in (("evil", "has no output 'evil'"), ("../x", "should match pattern")):
        refused = run_cli("logs", ended.job_id, "--output", name)
        assert refused.returncode == 2 and words in refused.stderr, refused.stderr
        assert refused.stderr.startswith("error: ") and "Traceback" not in refused.stderr
    monkeypatch.setenv("TRAINFLEET_TOKEN", ended.stranger)
    hidden = run_cli("logs", ended.job_id, "--output")
    assert hidden.returncode == 2 and "result.txt" not in hidden.stdout + hidden.stderr


def _cli_bytes(*args: str) -> bytes:
    """The CLI's stdout as bytes (``run_cli`` decodes it)."""
    done = subprocess.run(
        trainfleet(*args), capture_output=True, timeout=120, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
