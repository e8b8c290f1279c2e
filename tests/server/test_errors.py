"""Bad input gets a 4xx that names the problem; nothing answers 500 or leaks a traceback."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import wait_for

from trainfleet.client import BadRequest, Client, NotFound, Unauthorized, Unreachable
from trainfleet.control.services.tokens import digest
from trainfleet.spec.errors import SpecError
from trainfleet.spec.loading import load_job_text

from .harness import LiveServer, add_user

API = "/api/v1"
JOB = "name: ok\nroles:\n  worker: {command: 'true'}\n"


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx.Client]:
    """A raw HTTP client with the admin token, for what the SDK would not send."""
    headers = {"Authorization": f"Bearer {live.token}"}
    with httpx.Client(base_url=live.url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def done_job(live: LiveServer) -> str:
    with Client(live.url, live.token) as client:
        return client.wait(client.submit(JOB).id).id


def operations(live: LiveServer, job_id: str) -> list[tuple[str, str]]:
    """Every operation of the OpenAPI document, its path filled in with a real job."""
    document = httpx.get(f"{live.url}{API}/openapi.json").json()
    found = []
    for path, methods in document["paths"].items():
        for method in methods:
            url = path.format(
                job_id=job_id,
                role="worker",
                index=0,
                name="default",
                tree="a" * 64,
                user="admin",
                token_id="0" * 8,
                team="default",
                run_id="no-such-run",
            )
            found.append((method.upper(), url))
    return found


def test_every_endpoint_but_health_wants_a_token(live: LiveServer, done_job: str) -> None:
    checked = 0
    for method, url in operations(live, done_job):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eDp5"}):
            response = httpx.request(method, live.url + url, headers=headers, content=JOB)
            if url in ("/healthz", "/readyz"):
                assert response.status_code == 200
                continue
            if (method, url) == ("POST", f"{API}/session"):  # the sign-in: a token in its body
                assert response.status_code == 422, response.text
                continue
            assert response.status_code == 401, (method, url, headers)
            assert response.headers["www-authenticate"].startswith('Bearer realm="trainfleet"')
            assert method == "HEAD" or response.json()["detail"]  # HEAD answers have no body
            checked += 1
    assert checked >= 3 * 9
    assert Client(live.url, live.token).get(done_job).id == done_job  # nothing was changed


def test_unknown_and_revoked_tokens(live: LiveServer) -> None:
    with pytest.raises(Unauthorized, match="unknown or revoked") as raised:
        Client(live.url, "not-a-token").get("x")
    assert raised.value.status == 401
    with pytest.raises(Unauthorized, match="needs a token"):
        Client(live.url).find()
    store = live.engine.store
    from trainfleet.server.auth import TOKEN_CACHE_SECONDS

    token, record = add_user(store, "alice")
    assert store.token_by_digest(digest(token)) is not None
    with Client(live.url, token) as alice:
        job = alice.submit(JOB)
        assert job.user == "alice"
        assert store.revoke_token(record.id)

        def refused() -> bool:
            try:
                alice.get(job.id)
            except Unauthorized:
                return True
            return False

        # Servers trust a looked-up token for TOKEN_CACHE_SECONDS.
        wait_for(refused, timeout=TOKEN_CACHE_SECONDS + 10, what="the revoked token refused")


@pytest.mark.parametrize(
    "text",
    [
        "name: x\nroles: [",  # malformed YAML
        '{"name": "x", "roles": {"worker": {"command": "true"}}',  # malformed JSON
        "name: demo\nroles:\n  worker: {replica: 2, command: train}\n",  # unknown field
        "name: Bad_Name\nroles:\n  worker: {command: 'true'}\n",  # invalid value
        "",  # empty
        "- a list\n",
        "a: &a [*a]\n",  # recursive alias
        "name: x\nroles:\n  worker: {command: train}\n  worker: {command: train}\n",
        "kind: MPIJob\napiVersion: kubeflow.org/v1\n",
    ],
)
def test_a_job_that_cannot_be_read_gets_422_with_the_cli_message(client: Client, text: str) -> None:
    with pytest.raises(SpecError) as expected:
        load_job_text(text, "job.yaml")
    with pytest.raises(BadRequest) as raised:
        client.submit(text, filename="job.yaml")
    assert raised.value.status == 422
    assert str(raised.value) == str(expected.value)  # the same text `trainfleet run` prints
    assert [(p.file, p.line, p.field, p.message) for p in raised.value.problems] == [
        (p.file, p.line, p.field, p.message) for p in expected.value.problems
    ]


def test_spec_errors_name_file_line_and_field(client: Client) -> None:
    with pytest.raises(BadRequest) as raised:
        client.submit("name: demo\nroles:\n  worker: {replica: 2, command: train}\n")
    (problem,) = raised.value.problems
    assert (problem.file, problem.line, problem.field) == ("<request>", 3, "roles.worker.replica")
    assert str(raised.value).startswith("<request>:3: roles.worker.replica: unknown field")


def test_bodies_that_are_not_text_or_too_large(http: httpx.Client, live: LiveServer) -> None:
    response = http.post(f"{API}/jobs", content=b"name: x\n\xff\xfe\n")
    assert response.status_code == 422
    assert response.json()["detail"] == "<request>:2: is not UTF-8 text"
    big = JOB + "#" * (64 << 10)
    response = http.post(f"{API}/jobs", content=big)
    assert response.status_code == 413
    assert "larger than the server's limit of 65536 bytes" in response.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while reading
        for _ in range(100):
            yield b"#" * 4096

    assert http.post(f"{API}/jobs", content=chunks()).status_code == 413
    response = http.post(f"{API}/jobs", content=JOB, headers={"Content-Type": "image/png"})
    assert response.status_code == 415 and "application/yaml" in response.json()["detail"]
    for media_type in ("text/plain", "application/yaml; charset=utf-8"):
        response = http.post(f"{API}/jobs", content=JOB, headers={"Content-Type": media_type})
        assert response.status_code == 201, response.text


def test_unknown_and_path_like_job_ids(http: httpx.Client, client: Client) -> None:
    with pytest.raises(NotFound, match="no job 'nope'"):
        client.get("nope")
    for bad in ("../x", "..", "x/../../etc", "UPPER", "-x", "a" * 81, "x\x00", "%2e%2e"):
        with pytest.raises((NotFound, BadRequest)):
            client.get(bad)
        with pytest.raises((NotFound, BadRequest)):
            client.read_log(bad, "worker", 0)
    for raw in ("../x", "..%2Fx", "%2e%2e%2fetc%2fpasswd", "a%00b", "x/../../healthz"):
        for suffix in ("", "/tasks/worker/0/log", "/events/follow"):
            response = http.get(f"{API}/jobs/{raw}{suffix}")
            assert response.status_code in (404, 405, 422), (raw, suffix, response.text)
            assert "detail" in response.json()


def test_unknown_tasks_and_bad_ranges(client: Client, http: httpx.Client, done_job: str) -> None:
    with pytest.raises(NotFound, match=f"job {done_job} has no task ps/0 \\(tasks: worker/0\\)"):
        client.read_log(done_job, "ps", 0)
    with pytest.raises(NotFound):
        client.read_log(done_job, "worker", 7)
    with pytest.raises(NotFound):
        list(client.follow_log(done_job, "worker", 7))
    log = f"{API}/jobs/{done_job}/tasks/worker/0/log"
    response = http.get(log, params={"start": 5, "end": 2})
    assert response.status_code == 416 and "ends before it starts" in response.json()["detail"]
    for params in ({"start": -1}, {"end": -5}, {"start": "x"}, {"start": 2**63}):
        response = http.get(log, params=params)
        assert response.status_code == 422, params
        assert response.json()["detail"].startswith("query.")
    assert http.get(f"{log}/follow", params={"start": -1}).status_code == 422
    assert http.get(f"{log}/follow", headers={"Last-Event-ID": "x"}).status_code == 422
    assert http.get(f"{API}/jobs/{done_job}/tasks/worker/-1/log").status_code == 422


def test_bad_cursors_get_400(http: httpx.Client) -> None:
    huge_number = base64.urlsafe_b64encode(b"[1" + b"0" * 310 + b',"x"]').decode()
    for cursor in ("x", "!!!", "W10", "WzEsMl0", huge_number):
        response = http.get(f"{API}/jobs", params={"cursor": cursor})
        assert (response.status_code, response.json()["detail"]) == (400, "invalid cursor")


def test_bad_query_parameters(client: Client, http: httpx.Client, tmp_path: Path) -> None:
    for params in ({"limit": 0}, {"limit": 5000}, {"state": "sleeping"}, {"label": "novalue"}):
        response = http.get(f"{API}/jobs", params=params)
        assert response.status_code == 422, params
    detail = http.get(f"{API}/jobs", params={"label": "novalue"}).json()["detail"]
    assert detail.startswith("query.label.0: String should match pattern")
    for workdir in ("relative/dir", str(tmp_path / "missing"), "/etc/passwd"):
        with pytest.raises(BadRequest, match="is not an absolute path to a directory"):
            client.submit(JOB, server_workdir=workdir)
    response = http.post(f"{API}/jobs", params={"workdir": "/tmp\x00x"}, content=JOB)
    assert response.status_code == 422
    response = http.delete(f"{API}/jobs/nope", params={"force": "perhaps"})
    assert response.status_code == 422
    response = http.get(f"{API}/jobs", params={"stat": "running"})  # a typo is not ignored
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "unknown query parameter 'stat' (this operation takes: cursor, label, limit, name, "
        "queue, state, team, user)"
    )


def test_an_unexpected_error_is_a_500_without_a_traceback(
    live: LiveServer, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's ``queues`` breaks: called by the serving process, or through the door
    from the API's process (``apart``), whose answer is the error raised here."""

    def broken() -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(live.engine, "queues", broken)
    response = client._http.get(f"{API}/queues")
    assert response.status_code == 500
    assert response.json() == {
        "detail": "internal server error (the server's log has the details)",
        "problems": [],
    }
    assert "secret" not in response.text and "Traceback" not in response.text


def test_an_unreachable_server() -> None:
    with pytest.raises(Unreachable, match=r"cannot reach the server at http://127\.0\.0\.1:9"):
        Client("http://127.0.0.1:9", "x", timeout=5).find()


def test_the_servers_own_trouble_is_logged_once_per_cause_and_while(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage answers every request 503: the log says it once per cause (status and
    kind of error) per interval, and the next line counts the answers left out."""
    import time

    from trainfleet.domain.errors import Unavailable
    from trainfleet.server.errors import QuietLog

    quiet = QuietLog(every=0.3)
    with caplog.at_level("WARNING", logger="trainfleet.server"):
        for n in range(50):
            quiet.warn(503, Unavailable("down"), f"503 for GET /jobs/{n}: down")
        quiet.warn(507, RuntimeError("full"), "507 for POST /jobs: full")  # another cause
        time.sleep(0.35)
        quiet.warn(503, Unavailable("down"), "503 for GET /jobs/50: down")
    assert [record.getMessage() for record in caplog.records] == [
        "503 for GET /jobs/0: down",
        "507 for POST /jobs: full",
        "503 for GET /jobs/50: down (and 49 more like it since the last such line)",
    ]
