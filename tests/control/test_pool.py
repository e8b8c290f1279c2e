"""The keyed pool and the clock every job's controller runs on: each key's work in order
and never two at once, on a bounded number of threads; slow work off the quick threads."""

from __future__ import annotations

import random
import threading
import time

import pytest
from helpers import wait_for

from trainfleet.control.pool import Clock, KeyedPool


def _pool_threads(name: str) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith(f"{name}-")]


def test_each_keys_work_runs_in_order_and_alone_on_few_threads() -> None:
    pool = KeyedPool("ordered", workers=4, slow_workers=1)
    seen: dict[int, list[int]] = {key: [] for key in range(20)}
    inside: set[int] = set()
    overlaps: list[int] = []
    lock = threading.Lock()

    def call(key: int, number: int) -> None:
        with lock:
            if key in inside:
                overlaps.append(key)
            inside.add(key)
        time.sleep(random.random() / 2000)
        seen[key].append(number)
        with lock:
            inside.discard(key)

    def submitter(keys: range) -> None:
        for number in range(100):
            for key in keys:
                pool.submit(key, lambda key=key, number=number: call(key, number))

    submitters = [threading.Thread(target=submitter, args=(range(k, 20, 4),)) for k in range(4)]
    for thread in submitters:
        thread.start()
    for thread in submitters:
        thread.join()
    wait_for(lambda: all(len(numbers) == 100 for numbers in seen.values()), what="all run")
    assert all(numbers == list(range(100)) for numbers in seen.values()), "in order per key"
    assert overlaps == [], "two calls of one key ran together"
    assert 1 <= len(_pool_threads("ordered")) <= 4


def test_slow_work_holds_its_key_but_no_quick_thread() -> None:
    pool = KeyedPool("lanes", workers=1, slow_workers=2)
    release = threading.Event()
    order: list[str] = []
    pool.submit("a", lambda: (release.wait(10), order.append("a slow")), slow=True)
    pool.submit("a", lambda: order.append("a after"))
    pool.submit("b", lambda: order.append("b quick"))
    wait_for(lambda: "b quick" in order, timeout=5, what="another key's quick work")
    time.sleep(0.1)
    assert order == ["b quick"], "a's later work waits for its slow work"
    release.set()
    wait_for(lambda: len(order) == 3, timeout=5, what="a's work")
    assert order == ["b quick", "a slow", "a after"]


def test_quick_work_runs_one_call_at_a_time_and_a_stuck_call_gives_its_turn_up() -> None:
    """Quick calls of many keys run one at a time on a lane (threads that run together
    only fight for the interpreter's lock); a call that blocks past STUCK lets the others
    go on around it, up to the lane's threads, and a key that waits never waits long."""
    pool = KeyedPool("turns", workers=4, slow_workers=1)
    running, most = 0, 0
    lock = threading.Lock()
    done: list[int] = []

    def quick(key: int) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.001)  # a store write's worth, the GIL let go meanwhile
        with lock:
            running -= 1
            done.append(key)

    for number in range(400):
        pool.submit(number % 40, lambda key=number: quick(key))
    wait_for(lambda: len(done) == 400, what="every quick call")
    assert most == 1, f"{most} quick calls ran at once"

    release = threading.Event()
    pool.submit("blocked", lambda: release.wait(30))
    time.sleep(0.05)
    began = time.monotonic()
    later: list[float] = []
    for key in range(20):
        pool.submit(key, lambda: later.append(time.monotonic()))
    wait_for(lambda: len(later) == 20, timeout=5, what="the calls behind a blocked one")
    release.set()
    assert max(later) - began < 1.0, "the blocked call held the others up"
    assert len(_pool_threads("turns")) <= 4


def test_a_call_that_raises_is_logged_and_its_key_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = KeyedPool("raising", workers=1, slow_workers=1)
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("boom")

    pool.submit("k", boom)
    pool.submit("k", done.set)
    assert done.wait(5)
    assert "boom" in caplog.text


def test_the_clock_calls_in_time_order_whatever_the_order_asked() -> None:
    clock = Clock("test-clock")
    called: list[tuple[str, float]] = []
    now = time.monotonic()
    clock.at(now + 0.6, lambda: called.append(("late", time.monotonic())))
    clock.at(now + 0.2, lambda: called.append(("early", time.monotonic())))  # wakes it sooner
    clock.at(now - 1, lambda: called.append(("past", time.monotonic())))
    wait_for(lambda: len(called) == 3, timeout=5, what="three calls")
    assert [name for name, _ in called] == ["past", "early", "late"]
    assert called[1][1] >= now + 0.2 and called[2][1] >= now + 0.6
    assert called[1][1] < now + 0.5, "the earlier time, asked after, was not waited past"
