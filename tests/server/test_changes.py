"""The change feed (``GET /api/v1/events/follow``) and the job list's team and queue filters
and counts, against a real server: who sees which changes, resuming by Last-Event-ID (across
a restart too), the end of a revoked token's stream, one reader of the store for every
stream, and bad input."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from helpers import wait_for
from httpx_sse import connect_sse

from trainfleet.client import Client
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.conditions import Code
from trainfleet.domain.records import EventRecord, TeamRole
from trainfleet.store.database import Store
from trainfleet.wire import API_PREFIX, FeedNotice

from .harness import LiveServer, ServerProcess, add_user

QUICK = "name: {name}\nqueue: {queue}\nroles:\n  worker: {{command: 'true'}}\n"
FEED = f"{API_PREFIX}/events/follow"


@dataclass
class World:
    live: LiveServer
    admin: Client
    tokens: dict[str, str] = field(default_factory=dict)

    def client(self, user: str) -> Client:
        return Client(self.live.url, self.tokens[user], timeout=30)

    def run(self, user: str, queue: str, name: str = "quick") -> str:
        """A quick job of ``user`` in ``queue``, run to its end; its id."""
        with self.client(user) as client:
            job = client.submit(QUICK.format(name=name, queue=queue))
            client.wait(job.id)
        return job.id


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    live = LiveServer(tmp_path_factory.mktemp("changes") / "data").start()
    admin = Client(live.url, live.token, timeout=30)
    admin.create_team("vision")
    admin.create_team("audio")
    world = World(live, admin)
    for user, team in (("ana", "vision"), ("bo", "audio")):
        world.tokens[user], _ = add_user(live.engine.store, user, team, TeamRole.MEMBER)
    yield world
    admin.close()
    live.stop()


class Follower:
    """One stream of the change feed, read on a thread: its events as (kind, id, data)."""

    def __init__(self, url: str, token: str, last_event_id: str | None = None) -> None:
        self.url, self.token, self.last_event_id = url, token, last_event_id
        self.received: list[tuple[str, str, str]] = []
        self.status: int | None = None
        self.ended: float | None = None
        self.opened = threading.Event()
        self._stop = threading.Event()
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> Follower:
        self._thread.start()
        assert self.opened.wait(30), "the stream did not open"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)  # ends the read it waits in
        self._thread.join(timeout=10)

    def _read(self) -> None:
        # The server may leave, or __exit__ shut the socket down.
        with contextlib.suppress(httpx.TransportError, RuntimeError, OSError):
            self._follow()
        self.ended = time.monotonic()

    def _follow(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        timeout = httpx.Timeout(30, read=None)
        with (
            httpx.Client(timeout=timeout) as http,
            connect_sse(http, "GET", f"{self.url}{FEED}", headers=headers) as source,
        ):
            stream = source.response.extensions["network_stream"]
            self._socket = stream.get_extra_info("socket")
            self.status = source.response.status_code
            self.opened.set()
            if self.status != 200:
                return
            for event in source.iter_sse():
                self.received.append((event.event, event.id, event.data))
                if self._stop.is_set():
                    return

    def changes(self) -> list[EventRecord]:
        return [
            EventRecord.from_row(_json(data)) for kind, _, data in self.received if kind == "change"
        ]

    def notices(self) -> list[FeedNotice]:
        return [
            FeedNotice.model_validate_json(d) for kind, _, d in self.received if kind == "notice"
        ]


def _json(data: str) -> dict[str, object]:
    import json

    return dict(json.loads(data))


def _ended(follower: Follower, job_id: str, code: Code = Code.SUCCEEDED) -> bool:
    return any(e.job_id == job_id and e.task == "" and e.code == code for e in follower.changes())


def test_a_member_sees_its_teams_changes_and_none_of_another_team(world: World) -> None:
    with (
        Follower(world.live.url, world.tokens["ana"]) as ana,
        Follower(world.live.url, world.tokens["bo"]) as bo,
        Follower(world.live.url, world.live.token) as admin,
    ):
        mine = world.run("ana", "vision")
        theirs = world.run("bo", "audio")
        wait_for(lambda: _ended(ana, mine) and _ended(bo, theirs), 30, "both jobs' ends")
        wait_for(lambda: _ended(admin, mine) and _ended(admin, theirs), 30, "the admin's")
        with world.client("ana") as client:
            client.delete(mine)
        wait_for(lambda: _ended(ana, mine, Code.DELETED), 30, "ana told of the deletion")
    assert {e.job_id for e in ana.changes()} == {mine}
    assert {e.job_id for e in bo.changes()} == {theirs}
    assert {e.team for e in ana.changes()} == {"vision"}
    codes = [(e.task, e.code) for e in ana.changes()]
    assert codes[0] == ("", Code.SUBMITTED) and codes[-1] == ("", Code.DELETED)
    assert ("worker/0", Code.STARTED) in codes and ("worker/0", Code.EXITED) in codes
    ids = [int(i) for kind, i, _ in admin.received if kind == "change"]
    assert ids == sorted(set(ids))  # in order, none twice
    # Exactly the events the store holds, for someone who sees all.
    stored = world.live.engine.store.list_events(theirs)
    assert [e for e in admin.changes() if e.job_id == theirs] == stored


def test_last_event_id_resumes_with_exactly_the_missed_events(world: World) -> None:
    with Follower(world.live.url, world.live.token) as first:
        jobs = [world.run("ana", "vision", f"r{n}") for n in range(2)]
        wait_for(lambda: all(_ended(first, job) for job in jobs), 30, "the jobs' ends")
    seen = first.changes()
    cut = seen[len(seen) // 2].id
    missed = [e for e in seen if e.id > cut]
    with Follower(world.live.url, world.live.token, last_event_id=str(cut)) as again:
        wait_for(lambda: len(again.changes()) >= len(missed), 30, "the missed events")
        time.sleep(0.3)  # nothing more comes
    assert again.changes()[: len(missed)] == missed
    assert [e.id for e in again.changes()] == sorted({e.id for e in again.changes()})
    assert all(e.id > cut for e in again.changes())


def test_a_revoked_tokens_stream_ends_within_about_a_second(world: World) -> None:
    token, record = add_user(world.live.engine.store, "cy", "vision")
    with Follower(world.live.url, token) as follower:
        time.sleep(0.2)
        revoked = time.monotonic()
        assert world.live.engine.store.revoke_token(record.id)
        wait_for(lambda: follower.ended is not None, 10, "the stream's end")
    assert follower.ended is not None and follower.ended - revoked < 2.5


def test_one_reader_queries_the_store_however_many_streams_are_open(world: World) -> None:
    """Twenty streams read the store at most once a poll interval between them (each
    reading for itself would be twenty times that); a rate, not a ratio to one stream,
    whose own rate sinks when the machine is busy."""
    hub = world.live.app.state.change_hub
    calls: list[float] = []
    read = hub.jobs.changes

    def counted(after: int, limit: int) -> list[EventRecord]:
        calls.append(time.monotonic())
        return read(after, limit)

    hub.jobs.changes = counted
    try:
        with _followers(world, 20) as followers:
            time.sleep(0.5)  # every stream caught up and live
            calls.clear()
            started = time.monotonic()
            world.run("ana", "vision", "n20")
            wait_for(lambda: all(f.changes() for f in followers), 30, "every stream's news")
            time.sleep(0.5)
            rate = len(calls) / (time.monotonic() - started)
    finally:
        del hub.jobs.changes
    interval = world.live.app.state.settings.poll_interval
    # At most one read per poll interval (and a second one where a read filled a batch).
    assert 0 < rate <= 1.5 / interval, (rate, interval)


class _followers:
    def __init__(self, world: World, count: int) -> None:
        self.followers = [Follower(world.live.url, world.live.token) for _ in range(count)]

    def __enter__(self) -> list[Follower]:
        return [follower.__enter__() for follower in self.followers]

    def __exit__(self, *exc: object) -> None:
        for follower in self.followers:
            follower.__exit__()


def test_bad_input_is_refused_with_what_is_wrong(world: World) -> None:
    http = httpx.Client(
        base_url=world.live.url, headers={"Authorization": f"Bearer {world.live.token}"}
    )
    for bad in ("abc", "-1", "1.5", "99999999999999999999999"):
        answer = http.get(FEED, headers={"Last-Event-ID": bad})
        assert answer.status_code == 400 and "Last-Event-ID" in answer.json()["detail"], bad
    answer = http.get(f"{API_PREFIX}/jobs", params={"state": "sleeping"})
    assert answer.status_code == 422 and "state" in answer.json()["detail"]
    answer = http.get(f"{API_PREFIX}/jobs", params={"queue": "no-such-queue"})
    assert answer.status_code == 200 and answer.json()["jobs"] == [] and not answer.json()["counts"]
    answer = http.get(FEED, params={"after": "x"})
    assert answer.status_code == 422 and "after" in answer.json()["detail"]


def test_an_id_newer_than_any_event_is_told_to_resync(world: World) -> None:
    with Follower(world.live.url, world.live.token, last_event_id=str(2**40)) as follower:
        wait_for(lambda: follower.notices(), 10, "a notice")
    (notice,) = follower.notices()
    assert notice.code == "unknown-id" and notice.resync


def test_the_list_filters_by_team_and_queue_and_counts_states(world: World) -> None:
    ran = [world.run("ana", "vision", "c"), world.run("bo", "audio", "c")]
    with world.client("bo") as bo:
        page = world.admin.find(team="vision")
        assert {job.team for job in page.jobs} == {"vision"}
        assert page.counts == _counts(world.admin.list_jobs(team="vision"))
        audio = world.admin.find(queue="audio", limit=1)
        assert audio.jobs[0].queue == "audio" and audio.next_cursor is not None
        assert audio.counts == _counts(world.admin.list_jobs(queue="audio"))
        assert sum(audio.counts.values()) == len(list(world.admin.list_jobs(queue="audio")))
        assert world.admin.find(queue="audio", state="failed").counts == audio.counts
        assert bo.find(team="vision").jobs == []  # not bo's team: nothing, as for no team
        assert bo.find(team="vision").counts == {}
        assert ran[1] in [job.id for job in bo.list_jobs(queue="audio")]


def _counts(jobs: Iterator[object]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in jobs:
        state = str(job.state)  # type: ignore[attr-defined]
        counts[state] = counts.get(state, 0) + 1
    return counts


def test_resuming_across_a_server_restart(tmp_path: Path) -> None:
    """Ids are the store's: a client resumes on a restarted server with exactly what it
    missed, the events made while it was away included."""
    env = {"TRAINFLEET_ADMIN_TOKEN": "restart-test-admin-token-0123456789"}
    token = env["TRAINFLEET_ADMIN_TOKEN"]
    job_text = QUICK.format(name="q", queue="default")
    server = ServerProcess(tmp_path / "data", env)
    try:
        with Follower(server.url, token) as first, Client(server.url, token) as client:
            job = client.submit(job_text)
            client.wait(job.id)
            wait_for(lambda: _ended(first, job.id), 30, "the job's end")
    finally:
        server.stop()
    last = first.changes()[-1].id
    server = ServerProcess(tmp_path / "data", env)
    try:
        with Client(server.url, token) as client:
            later = [client.submit(job_text).id for _ in range(2)]
            for job_id in later:
                client.wait(job_id)
        with Follower(server.url, token, last_event_id=str(last)) as again:
            wait_for(lambda: all(_ended(again, j) for j in later), 30, "the later jobs' ends")
    finally:
        server.stop()
    with Store.open(DataDir(tmp_path / "data").database) as store:
        expected = store.changes(last, 10_000)
    assert again.changes()[: len(expected)] == expected
    assert {e.job_id for e in expected} == set(later)


def test_a_stopped_database_is_reported_on_the_feed_which_goes_on_after(tmp_path: Path) -> None:
    """A real PostgreSQL of the test's own, stopped under an open feed: the stream says so
    (no 500, no traceback), stays open, says when the database is back, and passes on the
    changes made then."""
    from private_postgres import private_postgres, skip_unless_available

    skip_unless_available("the change feed's outage test")
    token = "feed-outage-test-admin-token-0123456789"
    with private_postgres() as postgres:
        url_file = tmp_path / "database-url"
        url_file.write_text(postgres.url + "\n")
        server = ServerProcess(
            tmp_path / "data",
            {"TRAINFLEET_ADMIN_TOKEN": token},
            ["--database-url-file", str(url_file)],
        )
        try:
            with Follower(server.url, token) as follower:
                postgres.stop()
                wait_for(lambda: follower.notices(), 30, "a notice of the outage")
                postgres.start()
                with Client(server.url, token) as client:
                    job = wait_for(lambda: _submitted(client), 30, "a submission")
                    wait_for(lambda: _ended(follower, str(job)), 60, "the job's end")
                assert follower.ended is None  # the same stream all along
        finally:
            server.stop()
    codes = [notice.code for notice in follower.notices()]
    assert codes[:2] == ["unavailable", "available"], codes
    output = "\n".join(server.lines)
    assert "Traceback" not in output and " 500 " not in output, output


def _submitted(client: Client) -> str | None:
    try:
        return client.submit(QUICK.format(name="after", queue="default")).id
    except Exception:  # 503 while the server finds the database again
        return None
