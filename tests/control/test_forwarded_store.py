"""The API process's store: reads on its own read-only connection, every write in the
engine's process through the door (here both ends in this process, joined by a real
socket pair: the door's own tests run it across processes)."""

from __future__ import annotations

import inspect
import socket
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from trainfleet.control import forwarded_store
from trainfleet.control.door import DoorClient, DoorServer
from trainfleet.control.forwarded_store import ForwardedStore
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State, UserRecord
from trainfleet.store.database import Store


def _public(obj: object) -> set[str]:
    return {name for name, _ in inspect.getmembers(type(obj)) if not name.startswith("_")}


def test_every_method_of_the_store_is_a_read_or_a_write(tmp_path: Path) -> None:
    """A new method must be put on a side: a write left among the reads would be refused
    by the read-only connection, a read among the writes would cross for nothing."""
    with Store.open(tmp_path / "db") as store:
        parts = {
            "": store,
            **{part: getattr(store, part) for part in forwarded_store.WRITES if part},
        }
        for part, obj in parts.items():
            sides = forwarded_store.WRITES[part] | forwarded_store.READS[part]
            extra = forwarded_store.LOCAL_ONLY if part == "" else frozenset()
            assert not forwarded_store.WRITES[part] & forwarded_store.READS[part], part
            assert _public(obj) - {"accounts", "audit", "secrets", "workflows"} == sides | extra, (
                f"store part {part!r}"
            )


@pytest.fixture
def forwarded(tmp_path: Path) -> Iterator[tuple[ForwardedStore, Store]]:
    """A forwarded store, and the engine's own store that its writes reach."""
    target = tmp_path / "trainfleet.db"
    with Store.open(target) as engines, Store.open(target, read_only=True) as local:
        ours, theirs = socket.socketpair()
        server = DoorServer(
            Connection(theirs.detach()), _Engine(engines), forwarded_store.door_calls()
        )
        threading.Thread(target=server.serve, daemon=True).start()
        door = DoorClient(Connection(ours.detach()))
        yield ForwardedStore(local, door), engines
        door.close()


class _Engine:
    def __init__(self, store: Store) -> None:
        self.store = store


@pytest.fixture
def make_job_record() -> JobRecord:
    values = {"id": "demo-1", "name": "demo", "framework": "generic", "spec": "{}"}
    return JobRecord.from_row({**values, "workdir": "/tmp", "created_at": time.time()})


def test_writes_are_made_by_the_engine_s_store_and_read_here(
    forwarded: tuple[ForwardedStore, Store], make_job_record: JobRecord
) -> None:
    store, engines = forwarded
    store.add_job(make_job_record, [])
    assert engines.get_job(make_job_record.id) is not None
    store.transition(make_job_record.id, State.CANCELLED, Condition(Code.CANCELLED, "by ana"))
    assert store.get_job(make_job_record.id).state == State.CANCELLED
    store.accounts.add_user(UserRecord(name="ana", created_at=time.time()))
    assert store.accounts.get_user("ana") is not None


def test_what_a_write_raises_there_is_raised_here(
    forwarded: tuple[ForwardedStore, Store], make_job_record: JobRecord
) -> None:
    from trainfleet.store.errors import StoreConflict

    store, _ = forwarded
    store.add_job(make_job_record, [])
    with pytest.raises(StoreConflict):
        store.add_job(make_job_record, [])


def test_no_job_s_end_is_told_to_a_forwarded_store(forwarded: tuple[ForwardedStore, Store]) -> None:
    store, _ = forwarded
    with pytest.raises(AttributeError, match="told of no job's end"):
        store.on_job_end(lambda job_id: None)
