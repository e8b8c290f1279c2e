"""The dashboard in a real browser (Debian's chromium, headless, driven by playwright)
against a real server: sign in, see a job submitted from the CLI appear, follow and search
its log, see a kill -9 restart it, a refusal and a stop, a bad job file's problem at its
line, and the sign-in again once the token is revoked."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import missing
from server.harness import LiveServer, add_user

from trainfleet.domain.records import TeamRole

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

CHATTY = (
    'i=0; while true; do echo "line $i <b>bold</b> \\033[31mred\\033[0m"; '
    "i=$((i+1)); sleep 0.02; done"
)
JOB = (
    "name: chatty\nrestart: {policy: on-failure, max_restarts: 3, backoff: {initial: 0.1}}\n"
    f"roles:\n  worker:\n    command: {json.dumps(CHATTY)}\n"
)
SCREENSHOT = os.environ.get("TRAINFLEET_DASHBOARD_SCREENSHOT")
"""Where to save the job page's picture (the README's), if anywhere."""


@pytest.fixture(scope="module")
def chromium_path() -> str:
    path = os.environ.get("TRAINFLEET_TEST_CHROMIUM") or "/usr/bin/chromium"
    if not Path(path).exists():
        missing("chromium (bash scripts/browser.sh installs it)")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRAINFLEET_USAGE_INTERVAL", "0.5")  # charts drawn within a second
        live = LiveServer(tmp_path_factory.mktemp("dashboard") / "data").start()
    yield live
    live.stop()


@pytest.fixture
def browser(chromium_path: str) -> Iterator[object]:
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(
            executable_path=chromium_path,
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-sync"],
        )
        yield launched
        launched.close()


def sign_in(browser: object, server: LiveServer, token: str) -> object:
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    page.goto(server.url + "/")
    page.get_by_label("token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
    return page


def cli_submit(server: LiveServer, token: str, folder: Path) -> str:
    job = folder / "job.yaml"
    job.write_text(JOB)
    return cli_submit_file(server, token, job)


def cli_submit_file(server: LiveServer, token: str, job: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "trainfleet", "--server", server.url, "submit", str(job)],
        env={**os.environ, "TRAINFLEET_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split()[-1]


def test_a_member_follows_a_job_and_a_viewer_is_refused(
    browser: object, server: LiveServer, tmp_path: Path
) -> None:
    store = server.engine.store
    member, record = add_user(store, "mia", role=TeamRole.MEMBER)
    page = sign_in(browser, server, member)
    expect(page.locator("#who")).to_contain_text("mia")

    job_id = cli_submit(server, member, tmp_path)  # while the list is open: no reload
    row = page.locator(f'tr[data-job="{job_id}"]')
    expect(row).to_be_visible(timeout=15_000)
    expect(row.locator(".state")).to_have_text("running", timeout=15_000)

    row.get_by_role("link", name="chatty").click()
    log = page.locator(".log")
    expect(log).to_contain_text("<b>bold</b> red", timeout=15_000)  # as text, escapes gone
    assert page.locator(".log b").count() == 0
    first = _last_line_number(log.inner_text())
    expect(log).not_to_contain_text(f"line {first} ", timeout=15_000)  # followed: it moved on
    assert page.locator(".log .row").count() < 200  # only the rows in sight

    cpu = page.locator('.task-usage[data-task="worker/0"] figcaption').first
    expect(cpu).to_contain_text(re.compile(r"CPU: \d+% of a core"), timeout=15_000)

    page.get_by_label("search").fill("line 7 ")
    page.get_by_role("button", name="Search").click()
    expect(page.locator(".hits li").first).to_contain_text("line 7 ")

    pid = server.engine.tasks(job_id)[0].pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    task = page.locator('tr[data-task="worker/0"]')
    expect(task.locator("td").nth(4)).to_have_text("1", timeout=20_000)  # restarts
    expect(page.locator(".events")).to_contain_text("restarting", timeout=20_000)
    if SCREENSHOT:
        page.screenshot(path=SCREENSHOT, full_page=True)

    page.get_by_role("link", name="Queues").click()
    queue = page.locator('tr[data-queue="default"]')
    expect(queue.locator("td").nth(6)).to_have_text("1")  # running
    page.get_by_label("GPUs").fill("0")
    page.get_by_label("CPUs").fill("1")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator("output.answer")).to_have_text("Yes: it would start now.")
    page.get_by_label("memory").fill("100Ti")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator("output.answer")).to_contain_text("No (unschedulable)")
    page.go_back()
    expect(page.locator("h1")).to_contain_text("chatty")

    store.accounts.set_member("default", "mia", TeamRole.VIEWER)  # demoted, page open
    page.wait_for_timeout(2500)  # the token cache (2 s) forgets the member
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_role("alert").first).to_contain_text(re.compile("member|team-admin"))
    store.accounts.set_member("default", "mia", TeamRole.MEMBER)
    page.wait_for_timeout(2500)  # and the viewer
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("h1 .state")).to_have_text("cancelled", timeout=20_000)

    viewer, _ = add_user(store, "vic", role=TeamRole.VIEWER)
    seen = sign_in(browser, server, viewer)
    seen.goto(f"{server.url}/#/jobs/{job_id}")
    expect(seen.locator("h1")).to_contain_text("chatty")
    assert seen.get_by_role("button", name="Stop").count() == 0  # not its to press
    assert seen.get_by_role("button", name="Delete").count() == 0

    store.revoke_token(record.id)  # an open page returns to sign-in
    page.goto(f"{server.url}/#/jobs")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible(timeout=10_000)


def test_a_bad_job_file_shows_its_problem_at_its_line(browser: object, server: LiveServer) -> None:
    member, _ = add_user(server.engine.store, "ben", role=TeamRole.MEMBER)
    page = sign_in(browser, server, member)
    page.get_by_role("link", name="Submit").click()
    page.get_by_label("job file").fill(
        "name: broken\nroles:\n  worker:\n    replicas: many\n    command: 'true'\n"
    )
    page.get_by_role("button", name="Submit").click()
    problem = page.locator(".problems li").first
    expect(problem).to_contain_text("line 4")
    expect(problem).to_contain_text("replicas")
    assert page.url.endswith("#/submit")  # nothing was submitted


def test_a_submission_sent_again_after_its_answer_was_lost_is_one_job(
    browser: object, server: LiveServer
) -> None:
    """The page sends a key with each job file: the same file sent again after a lost
    answer (the job was stored) is answered with the first job; a later submission of the
    same file from a new form is a job of its own."""
    member, _ = add_user(server.engine.store, "lou", role=TeamRole.MEMBER)
    page = sign_in(browser, server, member)
    keys: list[str] = []

    def lose_the_first_answer(route: Any) -> None:
        if route.request.method == "POST":
            keys.append(route.request.headers.get("idempotency-key", ""))
            if len(keys) == 1:
                route.fetch()  # the server stores the job; the page never hears of it
                route.abort()
                return
        route.continue_()

    page.route("**/api/v1/jobs", lose_the_first_answer)
    page.get_by_role("link", name="Submit").click()
    page.get_by_label("job file").fill("name: sent-twice\nroles:\n  worker: {command: 'true'}\n")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator(".problems li").first).to_contain_text("cannot be reached")
    page.get_by_role("button", name="Submit").click()
    expect(page).to_have_url(re.compile(r"#/jobs/[^/]+$"))
    shown = page.url.rsplit("/", 1)[1]
    stored = [job.id for job in server.engine.store.list_jobs() if job.name == "sent-twice"]
    assert stored == [shown], stored
    assert len(keys) == 2 and keys[0] == keys[1] and re.fullmatch(r"[0-9a-f]{32}", keys[0])

    page.get_by_role("link", name="Submit").click()  # a new form: a new submission
    page.get_by_label("job file").fill("name: sent-twice\nroles:\n  worker: {command: 'true'}\n")
    page.get_by_role("button", name="Submit").click()
    expect(page).not_to_have_url(re.compile(f"#/jobs/{shown}$"))
    expect(page).to_have_url(re.compile(r"#/jobs/[^/]+$"))
    assert len([job for job in server.engine.store.list_jobs() if job.name == "sent-twice"]) == 2
    assert keys[2] != keys[0]


def test_a_cookie_less_request_and_a_forged_change_are_refused(
    browser: object, server: LiveServer
) -> None:
    member, _ = add_user(server.engine.store, "eve", role=TeamRole.MEMBER)
    page = sign_in(browser, server, member)
    status = page.evaluate(
        """async () => (await fetch('/api/v1/jobs/x/cancel', {method: 'POST'})).status"""
    )
    assert status == 403  # the session's cookie went, its CSRF token did not
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    status = page.evaluate("""async () => (await fetch('/api/v1/jobs')).status""")
    assert status == 401


def _last_line_number(text: str) -> int:
    numbers = [int(n) for n in re.findall(r"line (\d+) ", text)]
    assert numbers, text[-500:]
    return max(numbers)


def test_hostile_output_shows_as_text_and_a_deleted_job_says_so(
    browser: object, server: LiveServer, tmp_path: Path
) -> None:
    """A 10 MB line, bad UTF-8 and markup in a log; the job deleted while its page is open."""
    member, _ = add_user(server.engine.store, "hal", role=TeamRole.MEMBER)
    hostile = b"x" * 10_000_000 + b"\nbad \xff\xfe bytes\n<script>window.pwned=1</script>\n"
    (tmp_path / "hostile.txt").write_bytes(hostile)
    go = tmp_path / "go"  # made once the page follows, so the long line comes live, whole
    wait = f"until [ -e {go} ]; do sleep 0.1; done"
    script = f"echo waiting; {wait}; cat hostile.txt; echo done; sleep 600"
    text = f"name: hostile\nroles:\n  worker:\n    command: {json.dumps(script)}\n"
    (tmp_path / "job.yaml").write_text(text)
    job_id = cli_submit_file(server, member, tmp_path / "job.yaml")
    page = sign_in(browser, server, member)
    page.goto(f"{server.url}/#/jobs/{job_id}")
    log = page.locator(".log")
    expect(log).to_contain_text("waiting", timeout=20_000)
    go.touch()
    expect(log).to_contain_text("done", timeout=20_000)
    expect(log).to_contain_text("more characters")  # the long line, cut for the page
    expect(log).to_contain_text("bad \ufffd\ufffd bytes")
    expect(log).to_contain_text("<script>window.pwned=1</script>")
    assert page.evaluate("() => window.pwned") is None
    assert page.evaluate("() => 1 + 1") == 2  # the page still answers
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {member}"}) as api:
        assert api.delete(f"/api/v1/jobs/{job_id}", params={"force": True}).status_code == 204
    expect(page.get_by_role("alert").first).to_contain_text("deleted", timeout=20_000)
