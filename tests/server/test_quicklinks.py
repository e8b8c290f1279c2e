"""A job's quick link through a real server: a task's own web server (a real process on
the role's port) is proxied at ``/jobs/<id>/links/<name>/`` to whoever may read the job,
below its prefix (which ``X-Forwarded-Prefix`` tells it), its pages sandboxed for anyone
but the job's owner, and no other path, link or job reachable through it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import wait_for

from trainfleet.backends.supervision.ports import free_port
from trainfleet.client import Client
from trainfleet.domain.records import TeamRole

from .harness import LiveServer, add_user, raw_status

ECHO = """\
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Echo(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({
            "path": self.path,
            "prefix": self.headers.get("X-Forwarded-Prefix"),
            "authorization": self.headers.get("Authorization"),
            "cookie": self.headers.get("Cookie"),
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "sneaky=1; Path=/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

HTTPServer(("127.0.0.1", int(os.environ["TRAINFLEET_PORT"])), Echo).serve_forever()
"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path / "data").start()
    yield server
    server.stop()


def _get(live: LiveServer, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Cookie": "mine=1"} if token else {}
    return httpx.get(live.url + path, headers=headers, timeout=30)


def test_a_quicklink_serves_its_tasks_page_to_the_jobs_readers(
    live: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "echo.py").write_text(ECHO)
    port = free_port()
    job_file = (
        f"name: web\nqueue: vision\nroles:\n  web: {{command: '{sys.executable} "
        f"{tmp_path / 'echo.py'}'}}\nquicklinks: {{ui: 'http://web-0:{port}'}}\n"
    )
    with Client(live.url, live.token, timeout=30) as admin:
        admin.create_team("vision")
        admin.create_team("audio")
    store = live.engine.store
    owner, _ = add_user(store, "ana", "vision")
    viewer, _ = add_user(store, "vi", "vision", TeamRole.VIEWER)
    stranger, _ = add_user(store, "cy", "audio")
    with Client(live.url, owner, timeout=30) as client:
        job = client.submit(job_file)
        try:
            path = f"/jobs/{job.id}/links/ui/"
            (link,) = client.describe(job.id).services
            assert (link.name, link.path) == ("ui", path)
            wait_for(lambda: _get(live, f"{path}x", owner).status_code == 200, 60, "the page")
            assert client.describe(job.id).tasks[0].address == f"127.0.0.1:{port}"

            mine = _get(live, f"{path}deep/page?q=1", owner)
            assert mine.json() == {
                "path": "/deep/page?q=1",
                "prefix": f"/jobs/{job.id}/links/ui",
                "authorization": None,
                "cookie": None,
            }
            assert "set-cookie" not in mine.headers
            assert "content-security-policy" not in mine.headers

            theirs = _get(live, path, viewer)  # a reader's page: the owner's program made it
            assert theirs.status_code == 200 and theirs.json()["path"] == "/"
            assert theirs.headers["content-security-policy"].startswith("sandbox")

            assert _get(live, path, stranger).status_code == 404
            assert _get(live, path, None).status_code == 401
            missing = _get(live, f"/jobs/{job.id}/links/other/", owner)
            assert missing.status_code == 404 and "has no quick link there" in missing.text
            for sneaky in (
                f"/jobs/{job.id}/links/ui/../tensorboard/",
                f"/jobs/{job.id}/links/ui/%2e%2e/x",
                f"/jobs/{job.id}/links/ui%2fx/",
                f"/jobs/{job.id}/links/uix/",
            ):
                assert raw_status(live.url, sneaky, owner) == 404, sneaky
        finally:
            client.cancel(job.id)
            client.wait(job.id)
        ended = _get(live, path, owner)
        assert ended.status_code == 404 and ended.json()["state"] == "cancelled"
