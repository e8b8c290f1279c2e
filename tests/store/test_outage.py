"""The store through a real PostgreSQL outage: bounded calls fail clearly, patient ones wait.

The database is a private cluster of this module (the shared test database is never
stopped); ``pg_ctl stop -m fast`` cuts every connection, as a crash or a restart does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from helpers import wait_for
from private_postgres import PrivatePostgres, private_postgres, skip_unless_available

from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.store.connection import Connection, Transaction, patiently
from trainfleet.store.database import Store
from trainfleet.store.errors import StoreUnavailable
from trainfleet.store.targets import parse_target


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivatePostgres]:
    skip_unless_available("the outage tests")
    with private_postgres() as cluster:
        yield cluster


@pytest.fixture
def store(postgres: PrivatePostgres) -> Iterator[Store]:
    with Store.open(postgres.url) as store:
        yield store


def test_a_call_during_an_outage_raises_store_unavailable_and_works_once_it_is_back(
    postgres: PrivatePostgres, store: Store, make_job: Callable[..., JobRecord]
) -> None:
    store.add_job(make_job("before"), [TaskRecord(job_id="before", role="w", index=0)])
    postgres.stop()
    try:
        with pytest.raises(StoreUnavailable, match=r"unavailable|cannot connect"):
            store.get_job("before")
        with pytest.raises(StoreUnavailable):
            store.check(wait=0.5)
    finally:
        postgres.start()
    # A connection attempt slowed by a loaded machine (over SLOW_CONNECT) marks the database
    # as hanging: calls then fail fast until a reconnect in the background succeeds.
    job = wait_for(lambda: _answer(lambda: store.get_job("before")), 10, "the store's answer")
    assert isinstance(job, JobRecord) and job.id == "before"


def _answer(call: Callable[[], object]) -> object:
    """``call()``, or None while the store is unavailable."""
    try:
        return call()
    except StoreUnavailable:
        return None


def test_a_patient_write_waits_for_the_database_and_is_stored_once(
    postgres: PrivatePostgres, store: Store, make_job: Callable[..., JobRecord]
) -> None:
    store.add_job(make_job("waits"), [TaskRecord(job_id="waits", role="w", index=0)])
    postgres.stop()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with patiently():
                exited = Condition(Code.EXITED, "exit code 0")
                store.transition("waits", State.SUCCEEDED, exited, task=("w", 0))
        except BaseException as error:
            errors.append(error)

    writer = threading.Thread(target=write)
    try:
        writer.start()
        writer.join(timeout=5)  # longer than a request would wait: it still waits
        assert writer.is_alive() and not errors
    finally:
        postgres.start()
    writer.join(timeout=60)
    assert not writer.is_alive() and not errors
    assert [task.state for task in store.list_tasks("waits")] == [State.SUCCEEDED]
    events = [e for e in store.list_events("waits") if e.task == "w/0"]
    assert [e.state for e in events] == [State.SUCCEEDED]


def test_a_transaction_whose_link_was_cut_runs_again_whole(postgres: PrivatePostgres) -> None:
    connection = Connection(parse_target(postgres.url))
    tries: list[bool] = []

    def body(db: Transaction) -> None:
        tries.append(db.retried)
        db.execute("CREATE TABLE IF NOT EXISTS cut (n integer)")
        db.execute("INSERT INTO cut (n) VALUES (1)")
        if len(tries) == 1:  # the database ends this session mid-transaction
            with pytest.raises(psycopg.OperationalError):
                db.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            raise psycopg.OperationalError("cut")

    try:
        connection.write(body)
        assert tries == [False, False]  # cut before COMMIT: nothing was committed then
        assert connection.rows("SELECT COUNT(*) AS n FROM cut") == [{"n": 1}]
    finally:
        connection.write(lambda db: db.execute("DROP TABLE IF EXISTS cut"))
        connection.close()


def test_a_database_that_hangs_fails_calls_in_bounded_time_and_they_work_once_it_goes_on(
    postgres: PrivatePostgres, store: Store, make_job: Callable[..., JobRecord]
) -> None:
    """Its processes stopped: the first call fails once the watchdog cuts its link
    (STATEMENT_WAIT), later ones at once (the connection is opened again by a thread of
    the store's own, never by a caller); a patient write waits and is stored once the
    database goes on."""
    from trainfleet.store.connection import STATEMENT_WAIT

    store.add_job(make_job("hung"), [TaskRecord(job_id="hung", role="w", index=0)])
    postgres.freeze()
    written = threading.Event()

    def write() -> None:
        with patiently():
            store.transition("hung", State.RUNNING, Condition(Code.STARTED))
        written.set()

    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable):
            store.get_job("hung")
        assert time.monotonic() - started < STATEMENT_WAIT + 2
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(StoreUnavailable):
                store.get_job("hung")
            assert time.monotonic() - started < 0.5  # no connection attempt of its own
        threading.Thread(target=write, daemon=True).start()
        assert not written.wait(2)
    finally:
        postgres.thaw()
    assert written.wait(15)
    job = store.get_job("hung")
    assert job is not None and job.state == State.RUNNING


def test_a_store_closes_while_the_database_hangs(postgres: PrivatePostgres) -> None:
    """close() waits for the call caught on the hung database, which the watchdog ends: it
    returns within STATEMENT_WAIT, not when the database goes on."""
    from trainfleet.store.connection import STATEMENT_WAIT

    store = Store.open(postgres.url)
    postgres.freeze()
    try:

        def call() -> None:
            with pytest.raises(StoreUnavailable):
                store.get_job("any")

        caught = threading.Thread(target=call, daemon=True)
        caught.start()
        time.sleep(0.5)
        closing = threading.Thread(target=store.close, daemon=True)
        closing.start()
        closing.join(STATEMENT_WAIT + 2)
        assert not closing.is_alive()
    finally:
        postgres.thaw()
