"""`trainfleet ui` in a real browser: the dashboard of a local data directory, signed in by
the link it prints (once), showing and stopping a job that a `trainfleet run` in another
process runs; its token is no bearer token, and it is revoked when the command ends."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import kill_processes_under
from test_dashboard_browser import browser, chromium_path  # noqa: F401 (fixtures)

from trainfleet.control.assembly import engine_at

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect


def trainfleet(data: Path, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "trainfleet", "--data-dir", str(data), *args]
    return subprocess.Popen(argv, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    process = trainfleet(tmp_path / "data", "ui", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/#token=\S+)", line)
    assert found, line
    yield process, found.group(1)
    if process.poll() is None:
        process.kill()
    kill_processes_under(tmp_path)


def test_the_link_signs_in_once_and_stops_a_run_of_another_process(
    browser: object,  # noqa: F811
    ui: tuple[subprocess.Popen[str], str],
    tmp_path: Path,
) -> None:
    process, url = ui
    data = tmp_path / "data"
    job = tmp_path / "job.yaml"
    job.write_text("name: local\nroles:\n  worker: {command: 'sleep 600'}\n")
    run = trainfleet(data, "run", str(job), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(url)
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    assert "token" not in page.url  # the link's token left the address bar
    row = page.locator("tr", has_text="local")
    expect(row.locator(".state")).to_have_text("running", timeout=20_000)
    row.get_by_role("link", name="local").click()
    page.get_by_role("button", name="Stop").click()
    output, _ = run.communicate(timeout=60)
    assert "cancelled" in output, output
    expect(page.locator("h1 .state")).to_have_text("cancelled", timeout=20_000)

    again = browser.new_page()  # type: ignore[attr-defined]
    again.goto(url)
    expect(again.get_by_role("alert")).to_contain_text("was used")

    token = url.split("#token=")[1]
    base = url.split("/#")[0]
    answer = httpx.get(f"{base}/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 401 and "only signs the dashboard in" in answer.text

    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0  # Ctrl-C is how it ends
    engine = engine_at(data)
    try:
        tokens = [t for t in engine.store.list_tokens() if t.name.startswith("ui-")]
        assert tokens and all(t.revoked_at is not None for t in tokens)
    finally:
        engine.store.close()


def test_with_a_server_configured_it_points_there(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainfleet", "--server", "http://example.invalid:8080", "ui"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TRAINFLEET_TOKEN": "x" * 40},
    )
    assert done.returncode == 2
    assert "its dashboard is at http://example.invalid:8080/" in done.stderr
