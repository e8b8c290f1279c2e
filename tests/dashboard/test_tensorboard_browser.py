"""A job's TensorBoard in a real browser (Debian's chromium, headless), signed in to the
dashboard by its session cookie alone: the job's page links to it while it runs (a tab of
its own, ``rel=noopener``), the page TensorBoard draws there through the proxy shows the
scalar's tag that the job wrote, and once the job is stopped its page links to it no more."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from server.harness import LiveServer
from test_dashboard_browser import browser, chromium_path, expect, sign_in

from trainfleet.client import Client
from trainfleet.domain.records import State

pytest.importorskip("tensorboard")
pytest.importorskip("torch")

__all__ = ["browser", "chromium_path"]  # fixtures, shared with the dashboard's tests

WRITER = """\
import os, time
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter(os.environ["TRAINFLEET_TENSORBOARD_DIR"])
for step in range(5):
    writer.add_scalar("accuracy/heldout", step / 5, step)
writer.flush()
time.sleep(600)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path / "data").start()
    yield live
    live.stop()


def test_tensorboard_draws_the_jobs_scalar_behind_the_sign_in(
    browser: object, server: LiveServer, tmp_path: Path
) -> None:
    (tmp_path / "write.py").write_text(WRITER)
    text = (
        f"name: curves\nroles:\n  worker: {{command: '{sys.executable} {tmp_path / 'write.py'}'}}\n"
        "tensorboard: true\n"
    )
    with Client(server.url, server.token, timeout=30) as admin:
        job = admin.submit(text)
        try:
            page: Any = sign_in(browser, server, server.token)
            page.goto(f"{server.url}/#/jobs/{job.id}")
            service = page.locator('li[data-service="tensorboard"]')
            link = service.get_by_role("link", name="TensorBoard")
            expect(link).to_be_visible(timeout=60_000)  # once its task runs
            expect(service.locator(".state")).to_have_text("running")
            assert link.get_attribute("href") == admin.describe(job.id).services[0].path
            assert link.get_attribute("target") == "_blank"
            assert "noopener" in (link.get_attribute("rel") or "").split()
            with page.expect_popup() as opened:
                link.click()
            board = opened.value
            # TensorBoard may start after the page asks: its reload button asks again.
            tag = board.get_by_text("accuracy/heldout").first
            for _ in range(6):
                try:
                    expect(tag).to_be_visible(timeout=5_000)
                    break
                except AssertionError:
                    board.reload()
            expect(tag).to_be_visible(timeout=5_000)
            assert admin.get(job.id).state == State.RUNNING

            admin.cancel(job.id)  # the job page's link goes with its TensorBoard
            expect(service.get_by_role("link")).to_have_count(0, timeout=30_000)
            expect(service.locator(".state")).not_to_have_text("running")
        finally:
            admin.cancel(job.id)
            admin.wait(job.id)
