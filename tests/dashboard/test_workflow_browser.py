"""A workflow's run in the dashboard, in a real browser (Debian's chromium, headless,
driven by playwright) against a real server: a workflow submitted through the SDK is
listed, its run drawn as a graph (a box per step coloured by its state, an arrow per
need) that follows the run to its end, each step linking to its job's page and log; a
hostile parameter and step reason show as text, and a viewer is offered no retry."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from server.harness import LiveServer, add_user
from test_dashboard_browser import browser, chromium_path, expect, sign_in

from trainfleet.client import Client
from trainfleet.domain.records import TeamRole

__all__ = ["browser", "chromium_path"]  # fixtures, shared with the dashboard's tests

HOSTILE = "<img src=x onerror=window.pwned=1>"
RED = "rgb(180, 35, 24)"  # style.css --bad


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path / "data").start()
    yield live
    live.stop()


def flow(go: Path) -> str:
    """a fails once ``go`` exists; b needs it (skipped), c handles its failure."""
    wait = f"echo hello from a; until [ -e {go} ]; do sleep 0.1; done; exit 3"
    steps = {
        "a": {"job": {"roles": {"worker": {"command": f"sh -c {json.dumps(wait)}"}}}},
        "b": {"job": {"roles": {"worker": {"command": "true"}}}, "needs": ["a"]},
        "c": {
            "job": {"roles": {"worker": {"command": "echo cleanup"}}},
            "needs": ["a"],
            "when": "failure",
        },
    }
    workflow = {
        "kind": "Workflow",
        "name": "dag",
        "parameters": {"note": "plain"},
        "steps": steps,
    }
    return json.dumps(workflow, indent=2)


def test_a_workflow_run_is_drawn_as_a_graph_that_links_its_steps_to_their_jobs(
    browser: object, server: LiveServer, tmp_path: Path
) -> None:
    store = server.engine.store
    member, _ = add_user(store, "wes", role=TeamRole.MEMBER)
    go = tmp_path / "go"
    (tmp_path / "flow.json").write_text(flow(go))  # its needs come in the run's `graph`
    with Client(server.url, member, timeout=30) as client:
        submitted = client.submit_workflow(
            tmp_path / "flow.json", params={"note": HOSTILE}, send_folder=False
        )
    assert submitted.run is not None
    run_id = submitted.run.id

    page = sign_in(browser, server, member)
    page.get_by_role("link", name="Workflows").click()
    row = page.locator('tr[data-workflow="default/dag"]')
    expect(row).to_contain_text("wes")
    expect(row.locator("td.schedule")).to_have_text("none")
    expect(row.locator("td.last .state")).to_have_text("running")
    row.get_by_role("link", name="dag").click()
    expect(page.locator("h1")).to_have_text("dag")
    page.locator(f'tr[data-run="{run_id}"]').get_by_role("link", name="#1").click()

    expect(page.locator("h1 .state")).to_have_text("running")
    a = page.locator('.dag-step[data-step="a"]')
    expect(a).to_have_attribute("data-state", "running")
    expect(page.locator('.dag-step[data-step="b"]')).to_have_attribute("data-state", "waiting")
    edges = page.locator("path.dag-edge")
    pairs = {(e.get_attribute("data-from"), e.get_attribute("data-to")) for e in edges.all()}
    assert pairs == {("a", "b"), ("a", "c")}
    xs = {
        name: page.locator(f'.dag-step[data-step="{name}"]').bounding_box()["x"]  # type: ignore[index]
        for name in "abc"
    }
    assert xs["a"] < xs["b"] == xs["c"]  # columns by depth
    expect(page.get_by_role("button", name="Stop")).to_be_visible()

    go.touch()  # a fails: the open page follows the run to its end
    expect(page.locator("h1 .state")).to_have_text("failed", timeout=20_000)
    expect(a).to_have_attribute("data-state", "failed")
    expect(a).to_have_css("border-top-color", RED)  # a red box
    expect(a.locator(".why")).to_have_text("worker/0 exited with exit code 3")
    expect(a.locator(".tries")).to_contain_text("1 try")
    expect(page.locator('.dag-step[data-step="b"]')).to_have_attribute("data-state", "skipped")
    expect(page.locator('.dag-step[data-step="c"]')).to_have_attribute("data-state", "succeeded")
    assert page.get_by_role("button", name="Stop").count() == 0  # ended: nothing to stop
    expect(page.get_by_role("button", name="Retry", exact=True)).to_be_visible()
    expect(page.locator(".parameters")).to_contain_text(HOSTILE)
    assert page.locator("main img").count() == 0  # text, never markup
    assert page.evaluate("() => window.pwned") is None

    job = a.get_attribute("data-job")
    assert job
    a.get_by_role("link", name="a").click()
    expect(page).to_have_url(re.compile(f"#/jobs/{job}$"))
    expect(page.locator(".log")).to_contain_text("hello from a", timeout=15_000)

    # No reason the server gives a step carries a user's text today (step names are
    # lower-case letters, digits and '-'): the store is given one, as a later server might.
    store.workflows.update_steps(run_id, {"b": {"reason": HOSTILE}})
    viewer, _ = add_user(store, "vera", role=TeamRole.VIEWER)
    seen = sign_in(browser, server, viewer)
    seen.goto(f"{server.url}/#/runs/{run_id}")
    expect(seen.locator("h1 .state")).to_have_text("failed")
    expect(seen.locator('.dag-step[data-step="b"] .why')).to_have_text(HOSTILE)
    expect(seen.locator('tr[data-step="b"] .why')).to_have_text(HOSTILE)
    assert seen.locator("main img").count() == 0
    assert seen.evaluate("() => window.pwned") is None
    # A viewer may not retry (the run's `may` says so): no button offers it.
    expect(seen.get_by_role("button", name=re.compile("Retry"))).to_have_count(0)
    expect(seen.get_by_role("button", name="Stop")).to_have_count(0)
