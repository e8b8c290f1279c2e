"""The change feed's shared reader, in process on a real SQLite store: its memory is
bounded, a stream that stops reading holds only its position and is told it lost events,
a stream resuming from before that memory reads the store until it caught up, and a store
that stops answering is reported once, then its return."""

from __future__ import annotations

from pathlib import Path

from trainfleet.control.access import Caller
from trainfleet.control.services.reads import JobReads
from trainfleet.control.services.tokens import Principal, new_record
from trainfleet.datadir.layout import DataDir
from trainfleet.domain.errors import Unavailable
from trainfleet.domain.records import JobRecord, TaskRecord, TeamRole
from trainfleet.server.changes import ChangeFeed, ChangeHub
from trainfleet.server.sse import Poll


class Admitted:
    """Accounts whose every token holds (the stream's recheck is not under test here)."""

    def principal(self, digest: str) -> None:
        raise AssertionError("not asked here")


def _add(reads: JobReads, count: int, team: str = "vision", start: int = 0) -> None:
    for n in range(start, start + count):
        job = JobRecord(
            id=f"j-{n}",
            name="j",
            framework="generic",
            spec="{}",
            workdir="/",
            created_at=n,
            team=team,
        )
        reads.store.add_job(job, [TaskRecord(job_id=job.id, role="w", index=0)])


def _feed(hub: ChangeHub, after: int, teams: dict[str, TeamRole] | None = None) -> ChangeFeed:
    caller = Caller("ana", teams=teams or {"vision": TeamRole.VIEWER})
    who = Principal(new_record("t", "secret", "ana"), caller)
    return ChangeFeed(hub, Admitted(), who, after)  # type: ignore[arg-type]


def _kinds(poll: Poll) -> list[str]:
    return [str(message.event) for message in poll.messages]


def _reads(tmp_path: Path) -> JobReads:
    return JobReads.open(DataDir(tmp_path / "data"))


def test_a_stream_that_stops_reading_is_told_it_lost_events_and_memory_stays_bounded(
    tmp_path: Path,
) -> None:
    reads = _reads(tmp_path)
    hub = ChangeHub(reads, interval=3600, keep=20, batch=10)
    slow, live = _feed(hub, 0), _feed(hub, 0)
    assert slow.poll().messages == [] and live.poll().messages == []  # both caught up
    _add(reads, 50)
    received = []
    for _ in range(3):  # three reads of the store, the live stream taking all after each
        hub._refreshed = -float("inf")  # due
        while (poll := live.poll()).messages or poll.more:
            received += [m.data.id for m in poll.messages]
        assert len(hub) <= 20  # the hub keeps no more than ``keep``, however many it read
    assert received == list(range(1, 51))  # the live one got every event, in order
    lost = slow.poll()
    assert _kinds(lost)[0] == "notice"
    notice = lost.messages[0].data
    assert notice.code == "events-lost" and notice.resync and notice.after == 0
    _add(reads, 1, start=50)
    hub._refreshed = -float("inf")
    assert [m.data.id for m in slow.poll().messages] == [51]  # it goes on from the newest


def test_a_stream_resuming_from_before_the_hubs_memory_reads_the_store_until_caught_up(
    tmp_path: Path,
) -> None:
    reads = _reads(tmp_path)
    _add(reads, 30)
    _add(reads, 5, team="audio", start=30)
    hub = ChangeHub(reads, interval=0, keep=10, batch=8)
    feed = _feed(hub, after=3)
    got = []
    for _ in range(20):
        got += [m.data for m in feed.poll().messages]
    assert [event.id for event in got] == list(range(4, 31))  # vision's only, none twice
    assert {event.team for event in got} == {"vision"}
    assert not feed.catching_up


def test_a_store_that_stops_answering_is_reported_once_and_its_return_too(
    tmp_path: Path,
) -> None:
    reads = _reads(tmp_path)
    hub = ChangeHub(reads, interval=0, keep=10, batch=8)
    feed = _feed(hub, 0)
    feed.poll()
    working = reads.changes

    def down(after: int, limit: int) -> list[object]:
        raise Unavailable("the store is unavailable: connection refused")

    reads.changes = down  # type: ignore[assignment, method-assign]
    first, second = feed.poll(), feed.poll()
    assert _kinds(first) == ["notice"] and first.messages[0].data.code == "unavailable"
    assert second.messages == []
    _add(reads, 2)
    reads.changes = working  # type: ignore[method-assign]
    back = feed.poll()
    assert _kinds(back) == ["notice", "change", "change"]
    assert back.messages[0].data.code == "available"


def test_streams_per_user_are_bounded(tmp_path: Path) -> None:
    hub = ChangeHub(_reads(tmp_path), interval=1, per_user=2)
    assert hub.admit("ana") and hub.admit("ana") and not hub.admit("ana")
    assert hub.admit("bo")
    hub.leave("ana")
    assert hub.admit("ana")
