"""A notebook job through a real server: the real ``jupyterlab`` package runs as the job's
task, and the proxy at ``/notebooks/<id>/`` opens it, HTTP and kernel WebSocket, to its
owner and administrators only, adds Jupyter's token itself and never lets it out, refuses
a change from another site's page, and cuts a WebSocket once its caller may no longer open
the notebook. Idle, the notebook stops itself and its job succeeds. ``Client()`` in it
needs no arguments: it reaches the server with a token of the owner, revoked at the end."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import run_cli, wait_for
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from trainfleet.backends.launch import ServerAccess
from trainfleet.client import Client
from trainfleet.domain.records import State, TeamRole
from trainfleet.server import proxy
from trainfleet.vault.service_tokens import notebook_token

from .harness import LiveServer, add_user, raw_status

pytest.importorskip("jupyterlab")

PATH = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
"""The tasks' PATH: the test's Python (which has jupyterlab) first."""


def notebook_job(idle: str = "0") -> str:
    return f"name: nb\nnotebook: {{idle_timeout: {idle}}}\nenv: {{PATH: '{PATH}'}}\n"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path / "data").start()
    yield server
    server.stop()


def _headers(token: str | None, **more: str) -> dict[str, str]:
    return ({"Authorization": f"Bearer {token}"} if token else {}) | more


def _get(live: LiveServer, path: str, token: str | None, **headers: str) -> httpx.Response:
    return httpx.get(live.url + path, headers=_headers(token, **headers), timeout=30)


def _running(live: LiveServer, client: Client, job_id: str, token: str) -> str:
    """Wait until the notebook answers through the proxy; its path."""
    path = f"/notebooks/{job_id}/"
    assert [link.path for link in client.describe(job_id).services] == [path]

    def answers() -> bool:
        response = _get(live, f"{path}api/status", token)
        assert response.status_code in (200, 503), response.text
        return response.status_code == 200

    wait_for(answers, 90, "JupyterLab to answer through the proxy")
    return path


def _new_kernel(live: LiveServer, path: str, token: str) -> str:
    created = httpx.post(f"{live.url}{path}api/kernels", headers=_headers(token), json={})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def _channels(
    live: LiveServer, path: str, kernel: str, token: str, **headers: str
) -> ClientConnection:
    """The kernel's WebSocket, through the proxy."""
    url = f"{live.url.replace('http', 'ws', 1)}{path}api/kernels/{kernel}/channels"
    return connect(url, additional_headers=_headers(token, **headers), open_timeout=30)


def _kernel_socket(live: LiveServer, path: str, token: str) -> ClientConnection:
    return _channels(live, path, _new_kernel(live, path, token), token)


def execute(socket: ClientConnection, code: str, timeout: float = 60) -> str:
    """Run ``code`` in the kernel behind ``socket``; its result as text (``2``)."""
    msg_id = uuid.uuid4().hex
    socket.send(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "msg_type": "execute_request",
                    "username": "test",
                    "session": uuid.uuid4().hex,
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {"code": code, "silent": False, "store_history": False},
                "channel": "shell",
                "buffers": [],
            }
        )
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = json.loads(socket.recv(timeout=deadline - time.monotonic()))
        if message.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "execute_result":
            return str(message["content"]["data"]["text/plain"])
        if message["msg_type"] == "error":
            raise AssertionError(message["content"])
    raise AssertionError(f"no result of {code!r} in {timeout} s")


def test_a_notebook_runs_code_for_its_owner_and_administrators_only(live: LiveServer) -> None:
    with Client(live.url, live.token, timeout=30) as admin:
        admin.create_team("vision")
        admin.create_team("audio")
    store = live.engine.store
    owner, _ = add_user(store, "ana", "vision")
    mate, _ = add_user(store, "bo", "vision", TeamRole.TEAM_ADMIN)
    stranger, _ = add_user(store, "cy", "audio")
    with Client(live.url, owner, timeout=30) as client:
        job = client.submit(notebook_job() + "queue: vision\n")
        try:
            path = _running(live, client, job.id, owner)
            jupyter_token = notebook_token(live.engine.data_dir.root, job.id)

            kernel = _new_kernel(live, path, owner)
            with _channels(live, path, kernel, owner) as socket:
                assert execute(socket, "1+1") == "2"

            page = _get(live, f"{path}lab", owner)
            assert page.status_code == 200 and "jupyter-config-data" in page.text
            assert jupyter_token not in page.text, page.text[page.text.find(jupyter_token) - 200 :]
            assert "sandbox" not in page.headers.get("content-security-policy", "")
            assert "set-cookie" not in page.headers

            # An administrator may open it, in a sandbox: the owner's server made that page.
            seen = _get(live, f"{path}lab", live.token)
            assert seen.status_code == 200 and jupyter_token not in seen.text
            assert seen.headers["content-security-policy"].startswith("sandbox")

            refused = _get(live, f"{path}api/status", mate)
            assert refused.status_code == 403, refused.text
            assert "opening notebooks of other users needs an administrator" in refused.text
            assert _get(live, f"{path}api/status", stranger).status_code == 404
            assert _get(live, f"{path}api/status", None).status_code == 401
            with pytest.raises(InvalidStatus):
                _channels(live, path, kernel, mate)

            # No other site's page may change it, nor open a kernel's channels.
            evil = {"Origin": "http://evil.example"}
            posted = httpx.post(
                f"{live.url}{path}api/kernels", headers=_headers(owner, **evil), json={}
            )
            assert posted.status_code == 403
            with pytest.raises(InvalidStatus):
                _channels(live, path, kernel, owner, **evil)
            for sneaky in (f"/notebooks/{job.id}/../{job.id}/api/status", f"{path}%2e%2e/x"):
                assert raw_status(live.url, sneaky, owner) == 404
        finally:
            client.cancel(job.id)
            assert client.wait(job.id).state == State.CANCELLED


@pytest.mark.parametrize("lost", ["token revoked", "removed from its team"])
def test_an_open_kernel_socket_is_cut_once_its_caller_may_no_longer_open_it(
    live: LiveServer, lost: str
) -> None:
    with Client(live.url, live.token, timeout=30) as admin:
        token, record = add_user(live.engine.store, "ana", "default")
        with Client(live.url, token, timeout=30) as client:
            job = client.submit(notebook_job())
            try:
                path = _running(live, client, job.id, token)
                with _kernel_socket(live, path, token) as socket:
                    assert execute(socket, "40+2") == "42"
                    if lost == "token revoked":
                        admin.revoke_token(record.id)
                    else:
                        admin.remove_member("default", "ana")
                    with pytest.raises(ConnectionClosed):
                        deadline = time.monotonic() + 15
                        while time.monotonic() < deadline:
                            socket.recv(timeout=deadline - time.monotonic())
            finally:
                admin.cancel(job.id)


def test_one_user_cannot_take_every_websocket(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy, "MAX_SOCKETS_PER_USER", 2)
    with Client(live.url, live.token, timeout=30) as admin:
        token, _ = add_user(live.engine.store, "ana", "default")
        with Client(live.url, token, timeout=30) as client:
            job = client.submit(notebook_job())
            try:
                path = _running(live, client, job.id, token)
                kernel = _new_kernel(live, path, token)
                with _channels(live, path, kernel, token), _channels(live, path, kernel, token):
                    third = _channels(live, path, kernel, token)
                    with third, pytest.raises(ConnectionClosed) as closed:
                        third.recv(timeout=10)
                    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
                    with _channels(live, path, kernel, live.token) as admins:  # another user
                        assert execute(admins, "1+2") == "3"
                with _channels(live, path, kernel, token) as again:  # given back
                    assert execute(again, "2+2") == "4"
            finally:
                admin.cancel(job.id)


def test_an_idle_notebook_stops_and_its_job_succeeds(live: LiveServer) -> None:
    with Client(live.url, live.token, timeout=30) as admin:
        # Idle counts from the start: the window must outlast starting a kernel on a
        # loaded machine (4 s did not, on CI).
        job = admin.submit(notebook_job(idle="10s"))
        path = _running(live, admin, job.id, live.token)
        with _kernel_socket(live, path, live.token) as socket:
            assert execute(socket, "import time; time.sleep(12); 3") == "3"  # busy: not idle
        ended = admin.wait(job.id)
        assert ended.state == State.SUCCEEDED
        log = admin.read_log(job.id, "notebook", 0)
        assert b"JupyterLab idle for 10 s" in log
        started = next(e for e in admin.events(job.id) if e.code == "started")
        assert ended.finished_at is not None and ended.finished_at - started.time >= 22
        answer = _get(live, f"{path}api/status", live.token)
        assert answer.status_code == 404 and answer.json()["state"] == "succeeded"


def test_the_cli_starts_a_notebook_on_a_server_and_says_where_it_opens(
    live: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINFLEET_SERVER", live.url)
    monkeypatch.setenv("TRAINFLEET_TOKEN", live.token)
    monkeypatch.setenv("PATH", PATH)  # the server's tasks inherit it (the test's Python)
    started = run_cli("notebook", "start", "--idle-timeout", "0", cwd=tmp_path)
    assert started.returncode == 0, started.stdout + started.stderr
    job_id, where = started.stdout.splitlines()
    assert where == f"opens at {live.url}/notebooks/{job_id}/lab"
    assert _get(live, f"/notebooks/{job_id}/api/status", live.token).status_code == 200
    listed = run_cli("notebook", "list")
    assert job_id in listed.stdout and f"{live.url}/notebooks/{job_id}/lab" in listed.stdout
    stopped = run_cli("notebook", "stop", job_id)
    assert stopped.returncode == 0 and f"notebook {job_id} cancelled" in stopped.stdout


PLAIN_JOB = """name: plain
roles:
  main: {command: [sh, -c, 'printenv TRAINFLEET_SERVER TRAINFLEET_TOKEN; echo done']}
"""


def test_client_in_a_notebook_needs_no_arguments_and_its_token_ends_with_the_job(
    live: LiveServer,
) -> None:
    live.engine.server_access = ServerAccess(live.url)  # as server_engine sets it, --port
    token, _ = add_user(live.engine.store, "ana", "default")
    with Client(live.url, token, timeout=30) as client:
        plain = client.submit(PLAIN_JOB)  # no notebook: no token, not told the server
        job = client.submit(notebook_job())
        name = f"notebook {job.id}"
        try:
            path = _running(live, client, job.id, token)
            with _kernel_socket(live, path, token) as socket:
                whoami = "from trainfleet.client import Client; Client().whoami().user"
                assert execute(socket, whoami) == "'ana'"
                given = execute(socket, "import os; os.environ['TRAINFLEET_TOKEN']").strip("'")
                assert execute(socket, "os.environ['TRAINFLEET_SERVER']") == repr(live.url)
            with Client(live.url, given, timeout=30) as notebook:
                me = notebook.whoami()
                assert (me.user, me.admin, me.token) == ("ana", False, name)
            held = [t for t in client.tokens() if t.name == name]
            assert len(held) == 1 and held[0].revoked_at is None
            assert given.encode() not in client.read_log(job.id, "notebook", 0)
        finally:
            client.cancel(job.id)
        assert client.wait(job.id).state == State.CANCELLED
        assert [t.revoked_at is not None for t in client.tokens() if t.name == name] == [True]

        def refused() -> bool:  # the server trusts a token it looked up for 2 s
            return _get(live, "/api/v1/whoami", given).status_code == 401

        wait_for(refused, 10, "the revoked token to be refused")
        assert client.wait(plain.id).state == State.SUCCEEDED
        assert client.read_log(plain.id, "main", 0).strip() == b"done"
        assert [t.name for t in client.tokens() if t.name.startswith("notebook ")] == [name]
