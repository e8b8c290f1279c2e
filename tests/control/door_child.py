"""A process that serves a small target through the door (tests/control/test_door.py):
``python door_child.py FD WORKERS``, FD its end of the socket pair."""

from __future__ import annotations

import sys
import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection

from trainfleet.control.door import DoorServer


class Refusal(Exception):
    """Does not load again: its constructor wants two arguments, its args hold one."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")


class Target:
    def add(self, a: int, b: int) -> int:
        return a + b

    def fail(self, message: str) -> None:
        raise ValueError(message)

    def later(self, seconds: float, value: str) -> Future[str]:
        done: Future[str] = Future()
        threading.Timer(seconds, done.set_result, args=(value,)).start()
        return done

    def unpicklable(self) -> object:
        return lambda: None

    def refuse(self) -> None:
        raise Refusal("job a", "no")

    def secret(self) -> str:  # not in the door's calls
        return "never"


if __name__ == "__main__":
    conn = Connection(int(sys.argv[1]))
    allowed = ["add", "fail", "later", "unpicklable", "refuse"]
    DoorServer(conn, Target(), allowed, workers=int(sys.argv[2])).serve()
