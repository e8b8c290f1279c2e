"""Small hostile requests neither freeze nor exhaust the server (issue 10, items 5 and 6).

Bodies are sent over raw sockets where it matters how much of them the server reads
before it answers: an HTTP client sends the whole body before it reads the answer.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from .harness import LiveServer

API = "/api/v1"
MiB = 1 << 20


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {live.token}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=60) as client:
        yield client


def job(role: dict[str, object], **top: object) -> str:
    return json.dumps({"name": "hostile", "roles": {"worker": role}, **top})


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (job({"command": "echo a\0b"}), "roles.worker.command"),
        (job({"command": ["echo", "a\0b"]}), "roles.worker.command[1]"),
        (job({"command": "x", "working_dir": "/tmp\0x"}), "roles.worker.working_dir"),
        (job({"command": "x", "env": {"A": "1\0"}}), "roles.worker.env.A"),
        (job({"command": "x", "env": {"A\0": "1"}}), "roles.worker.env"),
        (job({"command": "x", "env": {"": "1"}}), "roles.worker.env['']"),
        (job({"command": "x", "env": {"A=B": "1"}}), "roles.worker.env.A=B"),
        (job({"command": [""]}), "roles.worker.command"),
        (job({"command": "x", "replicas": "2"}), "roles.worker.replicas"),
        (job({"command": "x", "replicas": True}), "roles.worker.replicas"),
    ],
)
def test_values_no_task_can_start_with_get_422_naming_the_field(
    http: httpx.Client, text: str, field: str
) -> None:
    for media_type in ("application/json", "application/yaml"):
        response = http.post(f"{API}/jobs", content=text, headers={"Content-Type": media_type})
        assert response.status_code == 422, response.text
        assert response.json()["problems"][0]["field"].startswith(field), response.text


def test_a_body_declared_json_goes_through_no_yaml_parser(http: httpx.Client) -> None:
    text = '{"name": "trailing", "roles": {"worker": {"command": "true"}},}'
    response = http.post(f"{API}/jobs", content=text, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("<request>:1: invalid JSON")
    response = http.post(f"{API}/jobs", content=text, headers={"Content-Type": "application/yaml"})
    assert response.status_code == 201, response.text


def test_a_job_of_a_million_tasks_is_refused_naming_the_field(http: httpx.Client) -> None:
    roles = {f"r{i}": {"replicas": 10_000, "command": "true"} for i in range(100)}
    response = http.post(f"{API}/jobs", content=json.dumps({"name": "huge", "roles": roles}))
    assert response.status_code == 422
    assert response.json()["problems"][0]["field"] == "roles"
    one = {"worker": {"replicas": 10_000, "command": "true"}}
    response = http.post(f"{API}/jobs", content=json.dumps({"name": "huge", "roles": one}))
    assert response.status_code == 422
    assert response.json()["problems"][0]["field"] == "roles.worker.replicas"
    assert "more than the limit of 1000 per job" in response.json()["detail"]
    assert http.get(f"{API}/jobs", params={"name": "huge"}).json()["jobs"] == []


def _raw(live: LiveServer) -> socket.socket:
    address = urlsplit(live.url)
    return socket.create_connection((address.hostname, address.port), timeout=60)


def _status_after_sending(
    connection: socket.socket, head: bytes, body: Iterator[bytes]
) -> tuple[int, int]:
    """Send ``head`` and then ``body`` until the server answers; (status, bytes sent)."""
    connection.sendall(head)
    sent = 0
    for chunk in body:
        readable, _, _ = select.select([connection], [], [], 0)
        if readable:
            break
        try:
            connection.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            break  # the server answered and closed: the answer is still to be read
        sent += len(chunk)
    answer = connection.recv(4096)
    return int(answer.split(b" ", 2)[1]), sent


def _zeros(total: int) -> Iterator[bytes]:
    chunk = b"0" * (64 << 10)
    for _ in range(total // len(chunk)):
        yield chunk


@pytest.mark.parametrize(("method", "path"), [("PUT", "/queues/x"), ("POST", "/jobs")])
def test_no_token_gets_401_before_the_body_is_read(
    live: LiveServer, method: str, path: str
) -> None:
    """A declared 50 MB body: the answer comes without the server waiting for any of it."""
    head = (
        f"{method} {API}{path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {50 * MiB}\r\n\r\n"
    ).encode()
    with _raw(live) as connection:
        connection.sendall(head)
        status = int(connection.recv(4096).split(b" ", 2)[1])  # no body sent at all
    assert status == 401


@pytest.mark.parametrize(("method", "path"), [("PUT", "/queues/x"), ("POST", "/jobs")])
def test_a_streamed_body_over_the_limit_gets_413_before_it_ends(
    live: LiveServer, method: str, path: str
) -> None:
    """Chunked, so no length is declared: the server stops reading past its limit (64 KiB
    here) and answers while the client still has most of its 50 MB to send."""
    head = (
        f"{method} {API}{path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {live.token}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()

    def chunked() -> Iterator[bytes]:
        for piece in _zeros(50 * MiB):
            yield b"%x\r\n%s\r\n" % (len(piece), piece)

    with _raw(live) as connection:
        status, sent = _status_after_sending(connection, head, chunked())
    assert status == 413
    assert sent < 40 * MiB


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server that takes bodies of up to 2 MiB."""
    server = LiveServer(tmp_path_factory.mktemp("roomy") / "data", max_body=2 * MiB).start()
    yield server
    server.stop()


def test_health_answers_while_a_large_job_is_read(roomy: LiveServer) -> None:
    """A job with a 1 MiB environment takes PyYAML a second or more to read: meanwhile,
    other requests are answered (they all waited for it before)."""
    env = "".join(f"      VARIABLE_{i:06}: value-{i}\n" for i in range(27_000))
    text = f"name: large\nroles:\n  worker:\n    command: 'true'\n    env:\n{env}"
    assert len(text) < MiB
    answer: list[httpx.Response] = []
    headers = {"Authorization": f"Bearer {roomy.token}", "Content-Type": "application/yaml"}
    submit = threading.Thread(
        target=lambda: answer.append(
            httpx.post(f"{roomy.url}{API}/jobs", content=text, headers=headers, timeout=120)
        )
    )
    healthy_meanwhile = 0
    with httpx.Client(base_url=roomy.url, timeout=60) as probe:
        submit.start()
        while submit.is_alive():
            if probe.get("/healthz").status_code == 200 and submit.is_alive():
                healthy_meanwhile += 1
        submit.join()
    assert answer[0].status_code == 201, answer[0].text
    assert healthy_meanwhile >= 20
