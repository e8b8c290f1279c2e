"""The engine's door across processes: calls run in another real process (a small target
served by ``door_child.py``), answered as futures."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import wait
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from trainfleet.control.door import DoorBusy, DoorClient, DoorClosed, Unanswerable

CHILD = Path(__file__).with_name("door_child.py")


def _open(workers: int = 4, **options: int) -> tuple[DoorClient, subprocess.Popen[bytes]]:
    ours, theirs = socket.socketpair()
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(theirs.fileno()), str(workers)],
        pass_fds=[theirs.fileno()],
    )
    theirs.close()
    return DoorClient(Connection(ours.detach()), **options), child


@pytest.fixture
def door() -> Iterator[DoorClient]:
    client, child = _open()
    yield client
    client.close()
    child.wait(timeout=10)


def test_a_call_runs_there_and_what_it_raises_crosses_with_its_type(door: DoorClient) -> None:
    assert door.call("add", 2, b=3).result(timeout=10) == 5
    with pytest.raises(ValueError, match="a named problem"):
        door.call("fail", "a named problem").result(timeout=10)
    with pytest.raises(AttributeError, match="no call 'secret'"):
        door.call("secret").result(timeout=10)


def test_many_calls_at_once_are_each_answered(door: DoorClient) -> None:
    calls = [door.call("add", n, n) for n in range(2000)]
    assert [call.result(timeout=30) for call in calls] == [2 * n for n in range(2000)]


def test_a_call_that_answers_later_holds_no_worker() -> None:
    """A submission waits for its batch's write: the door's threads serve other calls."""
    client, child = _open(workers=1)
    try:
        later = [client.call("later", 1.0, f"v{n}") for n in range(8)]
        quick = client.call("add", 1, 1)
        assert quick.result(timeout=0.9) == 2
        assert not any(call.done() for call in later)
        assert [call.result(timeout=10) for call in later] == [f"v{n}" for n in range(8)]
    finally:
        client.close()
        child.wait(timeout=10)


def test_what_cannot_cross_fails_its_own_call_only(door: DoorClient) -> None:
    with pytest.raises(Unanswerable, match="function"):
        door.call("unpicklable").result(timeout=10)
    with pytest.raises(Unanswerable, match="cannot be read"):
        door.call("refuse").result(timeout=10)
    with pytest.raises(AttributeError):  # a lambda: refused before anything is sent
        door.call("add", lambda: 1, 2)
    assert door.call("add", 1, 2).result(timeout=10) == 3


def test_too_many_unanswered_calls_are_refused_at_once() -> None:
    client, child = _open(most_in_flight=3)
    try:
        held = [client.call("later", 0.5, "x") for _ in range(3)]
        with pytest.raises(DoorBusy) as busy:
            client.call("add", 1, 1)
        assert busy.value.status == 503  # a request that meets it: try again later
        wait(held, timeout=10)
        assert client.call("add", 1, 1).result(timeout=10) == 2
    finally:
        client.close()
        child.wait(timeout=10)


def test_when_the_other_process_is_killed_every_waiting_call_fails_at_once() -> None:
    client, child = _open()
    waiting = [client.call("later", 60, "never") for _ in range(5)]
    assert not client.gone.is_set()
    child.send_signal(signal.SIGKILL)
    assert client.gone.wait(timeout=10)  # what the API's process watches to end with it
    began = time.monotonic()
    for call in waiting:
        with pytest.raises(DoorClosed):
            call.result(timeout=10)
    assert time.monotonic() - began < 5
    with pytest.raises(DoorClosed):
        client.call("add", 1, 1)
    child.wait(timeout=10)


def test_the_serving_side_ends_when_the_caller_closes() -> None:
    client, child = _open()
    assert client.call("add", 1, 1).result(timeout=10) == 2
    client.close()
    assert child.wait(timeout=10) == 0


CROSSING = ("domain", "spec", "store", "datadir", "scheduling", "vault", "workflows", "control")
"""The packages whose errors the engine's process may raise into a call."""


def test_every_error_the_engine_raises_crosses_the_door_as_itself() -> None:
    """An error that does not load again reaches the API as Unanswerable, a 500, instead of
    the 4xx it means (DiskFull did: OSError's pickling gives its constructor two arguments)."""
    import importlib
    import inspect
    import pickle
    import pkgutil

    import trainfleet

    failed = []
    for found in pkgutil.walk_packages(trainfleet.__path__, "trainfleet."):
        if found.name.split(".")[1] not in CROSSING or ".migrations" in found.name:
            continue  # (a migration runs only inside Alembic)
        module = importlib.import_module(found.name)
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and issubclass(cls, Exception)):
                continue
            if cls.__module__ != module.__name__:
                continue
            made = cls("a reason")
            back = pickle.loads(pickle.dumps(made))
            if type(back) is not cls or str(back) != str(made):
                failed.append(f"{cls.__module__}.{cls.__qualname__}")
    assert not failed
