"""Searching and downloading a task's log: lines found across chunk boundaries, in pages
that go on where the last stopped, in bounded reads; through the API for whoever may read
the job, and nobody else."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from trainfleet.client import Client
from trainfleet.datadir import log_search
from trainfleet.domain.records import TeamRole

from .harness import LiveServer, add_user

API = "/api/v1"


def write_log(path: Path, lines: int) -> list[int]:
    """A log of ``lines`` numbered lines (every 1000th says FOUND); their offsets."""
    offsets, at = [], 0
    with path.open("wb") as log:
        for number in range(lines):
            line = f"step {number:07d} {'FOUND it' if number % 1000 == 999 else 'loss 0.25'}\n"
            offsets.append(at)
            log.write(line.encode())
            at += len(line)
    return offsets


def test_every_line_is_found_once_in_pages(tmp_path: Path) -> None:
    log = tmp_path / "log"
    offsets = write_log(log, 200_000)  # ~4.6 MB: several chunks
    wanted = [offsets[n] for n in range(999, 200_000, 1000)]
    seen: list[int] = []
    start: int | None = 0
    while start is not None:
        found = log_search.search(log, "found IT", start, limit=30)
        assert all("FOUND it" in hit.line and hit.line.startswith("step") for hit in found.hits)
        seen += [hit.offset for hit in found.hits]
        start = found.next
    assert seen == wanted


def test_a_search_reads_at_most_its_budget(tmp_path: Path) -> None:
    log = tmp_path / "log"
    write_log(log, 100_000)
    found = log_search.search(log, "no such text", 0, budget=1 << 20)
    assert found.hits == [] and found.next is not None
    assert 1 << 20 <= found.next <= (1 << 20) + log_search.CHUNK
    assert log_search.search(log, "no such text", 0).next is None


def test_a_long_line_is_shown_around_the_match(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"a" * 10_000_000 + b"needle" + b"b" * 100 + b"\nnext line needle\n")
    found = log_search.search(log, "needle", 0)
    first, second = found.hits  # the first: where the piece of the long line holding it starts
    assert first.offset <= 10_000_000 < first.offset + log_search.LONGEST_LINE
    assert second.offset == 10_000_107
    assert len(found.hits[0].line) <= log_search.SHOWN and "needle" in found.hits[0].line
    assert found.hits[1].line == "next line needle"


def test_bad_bytes_and_a_missing_log(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"\xff\xfe bad \x1b[31mred\x1b[0m needle\n")
    (hit,) = log_search.search(log, "needle", 0).hits
    assert "\ufffd" in hit.line and "needle" in hit.line
    assert log_search.search(tmp_path / "none", "x") == log_search.Found([], None)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("search") / "data").start()
    yield live
    live.stop()


def test_search_and_download_through_the_api_for_readers_only(server: LiveServer) -> None:
    store = server.engine.store
    member, _ = add_user(store, "searcher", role=TeamRole.MEMBER)
    with Client(server.url, server.token) as admin:
        admin.create_team("other")
    stranger, _ = add_user(store, "stranger", team="other", role=TeamRole.MEMBER)
    script = "for i in $(seq 1 3000); do echo line $i; done; echo the END"
    text = f"name: s\nroles:\n  worker: {{command: {json.dumps(script)}}}\n"
    auth = {"Authorization": f"Bearer {member}"}
    with httpx.Client(base_url=server.url, headers=auth, timeout=30) as api:
        job = api.post(f"{API}/jobs", content=text, headers={"Content-Type": "application/yaml"})
        assert job.status_code == 201, job.text
        job_id = job.json()["job"]["id"]
        deadline = time.monotonic() + 60
        while api.get(f"{API}/jobs/{job_id}").json()["job"]["state"] != "succeeded":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        base = f"{API}/jobs/{job_id}/tasks/worker/0/log"
        found = api.get(f"{base}/search", params={"q": "line 29", "limit": 5}).json()
        assert [hit["line"] for hit in found["hits"]] == [
            "line 29",
            *(f"line {n}" for n in range(290, 294)),
        ]
        assert found["next"] is not None
        again = {"q": "line 29", "start": found["next"], "limit": 1000}
        rest = api.get(f"{base}/search", params=again).json()
        assert rest["hits"][0]["line"] == "line 294" and rest["next"] is None
        assert len(rest["hits"]) == 6 + 100  # 294-299, 2900-2999
        whole = api.get(f"{base}/download")
        assert whole.status_code == 200 and whole.text.endswith("the END\n")
        assert f'filename="{job_id}-worker-0.log"' in whole.headers["content-disposition"]
        part = api.get(f"{base}/download", headers={"Range": "bytes=0-6"})
        assert part.status_code == 206 and part.text == "line 1\n"
        for bad in ({"q": ""}, {"q": "x", "limit": 0}, {"q": "x", "start": -1}, {}):
            answer = api.get(f"{base}/search", params=bad)
            assert answer.status_code in (400, 422), (bad, answer.text)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {stranger}"}) as api:
        for tail in ("search?q=line", "download"):
            assert api.get(f"{base}/{tail}").status_code == 404
