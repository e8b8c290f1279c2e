"""A notebook job in a real browser (Debian's chromium, headless) against a real server: a
member submits it on the dashboard's Submit page, its job page shows the "notebook" link
once JupyterLab runs (a link to a tab of its own, ``rel=noopener``), the link opens
JupyterLab through the proxy on the session cookie alone, and a notebook there runs
``1+1`` in a kernel (over the proxied WebSocket) and shows ``2``. Stopped, the job's page
shows the notebook as cancelled, no longer a link.

All the while every response the browser received (its address, its headers, its body),
every request it sent (address, headers, body) and every WebSocket message either way
is recorded: Jupyter's token is in none of them."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import wait_for
from server.harness import LiveServer, add_user
from test_dashboard_browser import browser, chromium_path, expect

from trainfleet.client import Client
from trainfleet.domain.records import State, TeamRole
from trainfleet.vault.service_tokens import notebook_token

pytest.importorskip("jupyterlab")
PlaywrightError = pytest.importorskip("playwright.sync_api").Error

__all__ = ["browser", "chromium_path"]  # fixtures, shared with the dashboard's tests

PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"
"""The task's PATH: the test's Python (which has jupyterlab) first."""
JOB = f"name: nb\nnotebook: {{idle_timeout: 0}}\nenv: {{PATH: '{PATH}'}}\n"
NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "sum",
            "metadata": {},
            "outputs": [],
            "source": ["1+1"],
        }
    ],
    "metadata": {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}
NO_BODY = {101, 204, 301, 302, 303, 304, 307, 308}
"""Statuses of responses without a body to read."""
SLOW = 180_000
"""Milliseconds JupyterLab 4 may take to draw itself, or a kernel to start, on 2 cores."""


@dataclass
class Traffic:
    """What the browser received and sent while on: each response (address, headers,
    body), request (address, headers, body), event-stream message and WebSocket message,
    as (what it was, its bytes)."""

    received: list[tuple[str, bytes]] = field(default_factory=list)
    sent: list[tuple[str, bytes]] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    """Responses whose body the browser no longer had, and why."""
    on: bool = True

    def watch(self, context: Any) -> None:
        context.on("response", self._response)
        context.on("request", self._request)
        context.on("page", lambda page: self._page(context, page))

    def _page(self, context: Any, page: Any) -> None:
        page.on("websocket", self._socket)
        # An event stream's messages (the log the page follows) come as the browser's own
        # network events: playwright reads no endless body.
        devtools = context.new_cdp_session(page)
        devtools.on("Network.eventSourceMessageReceived", self._event)
        devtools.send("Network.enable")

    def _response(self, response: Any) -> None:
        if not self.on:
            return
        headers = response.all_headers()
        what = f"{response.status} {response.url}"
        head = f"{response.url}\n{json.dumps(headers)}".encode()
        body = b""
        endless = "text/event-stream" in headers.get("content-type", "")
        if not endless and response.status not in NO_BODY:
            try:
                body = response.body()
            except PlaywrightError as error:
                if self.on:  # else it came as the test closed the browser: never read
                    self.unread.append(f"{what}: {error}")
        self.received.append((what, head + b"\n" + body))

    def _request(self, request: Any) -> None:
        if not self.on:
            return
        head = f"{request.url}\n{json.dumps(request.all_headers())}".encode()
        what = f"{request.method} {request.url}"
        self.sent.append((what, head + (request.post_data_buffer or b"")))

    def _event(self, event: dict[str, Any]) -> None:
        if self.on:
            self.received.append((f"event {event.get('eventName')}", json.dumps(event).encode()))

    def _socket(self, socket: Any) -> None:
        self.sent.append((f"WebSocket {socket.url}", socket.url.encode()))

        def frame(into: list[tuple[str, bytes]]) -> Any:
            def add(payload: str | bytes) -> None:
                if self.on:
                    data = payload.encode() if isinstance(payload, str) else payload
                    into.append((f"WebSocket message {socket.url}", data))

            return add

        socket.on("framereceived", frame(self.received))
        socket.on("framesent", frame(self.sent))

    def carrying(self, secret: str) -> list[str]:
        """What carried ``secret`` (its address, headers or body, or a message)."""
        token = secret.encode()
        return [what for what, data in (*self.received, *self.sent) if token in data]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path / "data").start()
    yield live
    live.stop()


def _answers(server: LiveServer, path: str, token: str) -> bool:
    """Whether JupyterLab answers through the proxy (503 while it starts)."""
    response = httpx.get(
        f"{server.url}{path}api/status", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert response.status_code in (200, 503), response.text
    return response.status_code == 200


def test_a_member_opens_its_notebook_from_the_job_page_and_runs_code(
    browser: Any, server: LiveServer
) -> None:
    member, _ = add_user(server.engine.store, "nia", role=TeamRole.MEMBER)
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    traffic = Traffic()
    traffic.watch(context)
    job_id = None
    with Client(server.url, server.token, timeout=30) as admin:
        try:
            job_id, path = _run_one_plus_one(context, server, member)
        finally:
            traffic.on = False
            context.close()
            if job_id is None:  # it failed before the page showed the job: find it
                job_id = next((job.id for job in admin.list_jobs()), None)
            if job_id is not None:
                admin.cancel(job_id)
                assert admin.wait(job_id).state == State.CANCELLED

    token = notebook_token(server.engine.data_dir.root, job_id)
    assert len(token) >= 32
    assert traffic.carrying(token) == []
    # Every body was read but the log's size probe (`end=0`: empty, and never read).
    assert all("?start=0&end=0:" in unread for unread in traffic.unread), traffic.unread
    # And what was recorded held what it must: JupyterLab's page with its configuration,
    # the kernel's messages, the notebook's log as the job page followed it, the requests.
    pages = [data for what, data in traffic.received if what == f"200 {server.url}{path}lab"]
    assert pages and b"jupyter-config-data" in pages[0]
    messages = [data for what, data in traffic.received if what.startswith("WebSocket ")]
    assert any(b'"execute_result"' in data for data in messages)
    events = [data for what, data in traffic.received if what.startswith("event ")]
    assert any(b"JupyterLab on 127.0.0.1" in data for data in events)
    assert any(what.startswith(f"POST {server.url}{path}api/") for what, _ in traffic.sent)


def _run_one_plus_one(context: Any, server: LiveServer, member: str) -> tuple[str, str]:
    """Sign in as ``member``, submit the notebook job, open it from its job page, run
    ``1+1`` there and stop the job from its page; the job's id and its notebook's path."""
    page = context.new_page()
    page.goto(server.url + "/")
    page.get_by_label("token").fill(member)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()

    page.get_by_role("link", name="Submit").click()
    page.get_by_label("job file").fill(JOB)
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"#/jobs/[^/?]+$"))
    job_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("h1")).to_contain_text("nb")
    service = page.locator('li[data-service="notebook"]')
    link = service.get_by_role("link", name="notebook")
    expect(link).to_be_visible(timeout=60_000)  # once its task runs: no reload
    expect(service.locator(".state")).to_have_text("running")
    path = f"/notebooks/{job_id}/"
    assert link.get_attribute("href") == f"{path}lab"
    assert link.get_attribute("target") == "_blank"
    assert "noopener" in (link.get_attribute("rel") or "").split()

    # The notebook to run, put in its working folder through Jupyter's own API.
    wait_for(lambda: _answers(server, path, member), 120, "JupyterLab to answer")
    put = httpx.put(
        f"{server.url}{path}api/contents/sum.ipynb",
        headers={"Authorization": f"Bearer {member}"},
        json={"type": "notebook", "format": "json", "content": NOTEBOOK},
        timeout=30,
    )
    assert put.status_code in (200, 201), put.text

    with page.expect_popup() as opened:
        link.click()
    lab = opened.value
    lab.wait_for_load_state()
    assert lab.url.startswith(f"{server.url}{path}lab")
    assert lab.evaluate("() => window.opener") is None  # rel=noopener
    listed = lab.locator(".jp-DirListing-item", has_text="sum.ipynb")
    expect(listed).to_be_visible(timeout=SLOW)
    listed.dblclick()
    # Its kernel started and idle: code run before it has one asks which kernel to start.
    kernel = lab.get_by_role("contentinfo").get_by_role("button", name="| Idle")
    expect(kernel).to_contain_text("Python 3", timeout=SLOW)
    cell = lab.locator(".jp-Notebook .jp-CodeCell").first
    editor = cell.locator(".cm-content")
    expect(editor).to_have_text("1+1", timeout=SLOW)
    editor.click()
    lab.keyboard.press("Shift+Enter")
    expect(cell.locator(".jp-OutputArea-output")).to_have_text("2", timeout=SLOW)
    expect(cell.locator(".jp-InputArea-prompt")).to_have_text("[1]:")

    page.bring_to_front()
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 .state")).to_have_text("cancelled", timeout=30_000)
    # Its Jupyter ends well when stopped (exit 0): the notebook says "succeeded".
    ended = re.compile(r"^(cancelled|succeeded)$")
    expect(service.locator(".state")).to_have_text(ended, timeout=30_000)
    expect(service.get_by_role("link")).to_have_count(0)  # not a link once stopped
    return job_id, path
