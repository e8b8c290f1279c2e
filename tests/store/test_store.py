"""The SQL store: one transaction per change, events for every state change, WAL on SQLite."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from trainfleet.store.database import Store
from trainfleet.store.layout import DataDir
from trainfleet.store.logs import LogTail, read_range
from trainfleet.store.records import JobRecord, State, TaskRecord


def _job(job_id: str = "demo-1") -> JobRecord:
    return JobRecord(
        id=job_id,
        name="demo",
        framework="generic",
        spec="{}",
        workdir="/tmp",
        created_at=time.time(),
    )


def test_job_tasks_and_events_round_trip(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    store = Store(data.database)
    store.add_job(
        _job(),
        [TaskRecord(job_id="demo-1", role="worker", index=i, address=f"h:{i}") for i in range(2)],
    )
    store.update_task("demo-1", "worker", 1, message="started, pid 42", state=State.RUNNING, pid=42)
    store.update_job("demo-1", state=State.RUNNING)

    assert store.get_job("demo-1") == _job().model_copy(
        update={"state": State.RUNNING, "created_at": store.get_job("demo-1").created_at}
    )  # type: ignore[union-attr]
    tasks = {t.name: t for t in store.list_tasks("demo-1")}
    assert tasks["worker/1"].pid == 42 and tasks["worker/1"].state == State.RUNNING
    assert tasks["worker/0"].state == State.QUEUED
    events = store.list_events("demo-1")
    assert [(e.task, e.state) for e in events] == [
        ("", "queued"),
        ("worker/1", "running"),
        ("", "running"),
    ]
    assert store.list_events("demo-1", after=events[1].id) == events[2:]
    assert store.get_job("nope") is None
    mode = sqlite3.connect(tmp_path / "trainfleet.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_second_store_on_the_same_file_sees_the_jobs(tmp_path: Path) -> None:
    url = DataDir(tmp_path).database
    Store(url).add_job(_job("a-1"), [])
    Store(url).add_job(_job("b-1"), [])
    assert [job.id for job in Store(url).list_jobs()] == ["b-1", "a-1"]


def test_duplicate_job_id_is_refused_and_nothing_is_lost(tmp_path: Path) -> None:
    store = Store(DataDir(tmp_path).database)
    store.add_job(_job(), [TaskRecord(job_id="demo-1", role="w", index=0)])
    with pytest.raises(Exception, match="UNIQUE"):
        store.add_job(_job(), [TaskRecord(job_id="demo-1", role="w", index=0)])
    assert len(store.list_jobs()) == 1 and len(store.list_tasks("demo-1")) == 1


def test_job_ids_that_look_like_paths_are_refused(tmp_path: Path) -> None:
    data = DataDir(tmp_path)
    for bad in ("../etc", "a/b", "", "UPPER"):
        with pytest.raises(ValueError, match="invalid job id"):
            data.job_dir(bad)


def test_log_tail_returns_whole_lines_and_holds_partial_ones(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    tail = LogTail(log)
    assert tail.read() == b""
    log.write_bytes(b"one\ntw")
    assert tail.read() == b"one\n"
    with log.open("ab") as f:
        f.write(b"o\nthree")
    assert tail.read() == b"two\n"
    assert tail.read(final=True) == b"three"
    assert tail.pending() == 0
    assert read_range(log, 4, 7) == b"two"


def test_log_tail_passes_on_a_line_longer_than_a_chunk(tmp_path: Path) -> None:
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * 10 + b"\n")
    tail = LogTail(log)
    assert tail.read(limit=4) == b"xxxx"
    assert tail.read(limit=4) == b"xxxx"
    assert tail.read(limit=4) == b"xx\n"


def test_log_tail_skips_ahead_to_a_line_start(tmp_path: Path) -> None:
    log = tmp_path / "burst.log"
    log.write_bytes(b"".join(b"line %03d\n" % n for n in range(100)))  # 9 bytes a line
    tail = LogTail(log)
    assert tail.read(limit=9) == b"line 000\n"
    assert tail.pending() == 99 * 9
    skipped = tail.skip(keep=20)
    assert tail.read() == b"line 098\nline 099\n"
    assert skipped == 97 * 9
    assert tail.skip(keep=20) == 0
