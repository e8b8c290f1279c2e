"""The local backend's exit watcher: one thread learns how every task ended (pidfds in one
selector, or polling where there are none), each exit reported once, with its code."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import wait_for

from trainfleet.backends.local import watcher as watcher_module
from trainfleet.backends.local.processes import _foreign_poll
from trainfleet.backends.local.watcher import ExitWatcher, Watch


class Exits:
    """The exits reported, by pid, in the order they came."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def ended(self, pid: int) -> Callable[[int], None]:
        def ended(code: int) -> None:
            with self._lock:
                self.seen.append((pid, code))

        return ended

    def codes(self) -> dict[int, int]:
        with self._lock:
            return dict(self.seen)

    def wait(self, count: int, timeout: float = 30) -> dict[int, int]:
        wait_for(lambda: len(self.seen) >= count, timeout, f"{count} exits")
        return self.codes()


def child_watch(process: subprocess.Popen[bytes], exits: Exits, lingers: bool = False) -> Watch:
    return Watch(process.pid, process.poll, lambda: lingers, exits.ended(process.pid))


@pytest.fixture
def watcher() -> Iterator[ExitWatcher]:
    made = ExitWatcher()
    yield made
    made.close()


def test_many_tasks_are_each_reported_once_with_their_code_on_few_threads(
    watcher: ExitWatcher,
) -> None:
    """200 tasks of random lengths and codes: each exit once, right, and the threads stay
    one watcher and at most two cleanups (a thread per task before)."""
    rng = random.Random(30)
    before = threading.active_count()
    exits = Exits()
    expected = {}
    for n in range(200):
        code = n % 7
        argv = ["sh", "-c", f"sleep {rng.uniform(0, 1.5):.2f}; exit {code}"]
        process = subprocess.Popen(argv)
        expected[process.pid] = code
        watcher.watch(child_watch(process, exits))
    deadline = time.monotonic() + 30
    while len(exits.seen) < 200:
        assert threading.active_count() <= before + 3, [t.name for t in threading.enumerate()]
        assert time.monotonic() < deadline, f"{len(exits.seen)} exits of 200"
        time.sleep(0.01)
    time.sleep(0.3)  # none reported twice
    assert len(exits.seen) == 200
    assert exits.codes() == expected
    assert watcher.cleanup.threads <= 2


def test_a_task_killed_with_sigkill(watcher: ExitWatcher) -> None:
    exits = Exits()
    process = subprocess.Popen(["sleep", "30"])
    watcher.watch(child_watch(process, exits))
    time.sleep(0.1)
    assert exits.seen == []
    process.send_signal(signal.SIGKILL)
    assert exits.wait(1) == {process.pid: -signal.SIGKILL}


def _orphan(seconds: float) -> int:
    """A ``sleep`` that is not our child (its parent ended at once): as a shim that an
    earlier server started is to this one."""
    out = subprocess.run(
        ["sh", "-c", f"sleep {seconds} >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout)


@pytest.mark.parametrize("recorded", [3, None])
def test_an_adopted_process_ending(
    watcher: ExitWatcher, tmp_path: Path, recorded: int | None
) -> None:
    """Not a child: its pidfd says it ended, and its record how (none: it was killed)."""
    record = tmp_path / "worker-0-1"
    pid = _orphan(0.5)
    exits = Exits()
    watcher.watch(Watch(pid, _foreign_poll(pid, record), lambda: False, exits.ended(pid)))
    if recorded is not None:
        Path(f"{record}.exit").write_text(f"{recorded}\n")
    time.sleep(0.2)
    assert exits.seen == []
    assert exits.wait(1) == {pid: -signal.SIGKILL if recorded is None else recorded}


def test_an_adopted_process_gone_before_it_is_watched(watcher: ExitWatcher, tmp_path: Path) -> None:
    record = tmp_path / "worker-0-1"
    Path(f"{record}.exit").write_text("4\n")
    pid = _orphan(0)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), 10, "the orphan to be gone")
    exits = Exits()
    watcher.watch(Watch(pid, _foreign_poll(pid, record), lambda: False, exits.ended(pid)))
    assert exits.wait(1) == {pid: 4}


def _exited(process: subprocess.Popen[bytes]) -> None:
    """Wait until ``process`` has ended, without reaping it (it stays a zombie)."""
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)


def test_a_task_that_ended_before_it_was_watched(watcher: ExitWatcher) -> None:
    """The registration races the exit: a task already over is reported at once."""
    exits = Exits()
    quick = [subprocess.Popen(["sh", "-c", f"exit {n}"]) for n in range(5)]
    for process in quick:
        _exited(process)
        watcher.watch(child_watch(process, exits))
    assert exits.wait(5, timeout=5) == {p.pid: n for n, p in enumerate(quick)}


def test_a_stopped_task_ends_when_its_group_is_gone(watcher: ExitWatcher) -> None:
    """While a stopped task's group drains (its grace), the exit waits for the last member;
    a kill ends the wait."""
    exits = Exits()
    argv = ["sh", "-c", "sleep 1.5 & exit 5"]
    draining = subprocess.Popen(argv, start_new_session=True)
    killed = threading.Event()
    lingers = lambda: not killed.is_set()  # noqa: E731
    watcher.watch(Watch(draining.pid, draining.poll, lingers, exits.ended(draining.pid)))
    started = time.monotonic()
    assert exits.wait(1, timeout=10) == {draining.pid: 5}
    assert time.monotonic() - started >= 1.0

    second = subprocess.Popen(["sh", "-c", "sleep 30 & exit 6"], start_new_session=True)
    killed.clear()
    watcher.watch(Watch(second.pid, second.poll, lingers, exits.ended(second.pid)))
    time.sleep(0.5)
    assert len(exits.seen) == 1  # its sleep still runs
    killed.set()
    assert exits.wait(2, timeout=5)[second.pid] == 6
    os.killpg(second.pid, signal.SIGKILL)


def test_close_ends_the_threads(watcher: ExitWatcher) -> None:
    """close() ends the watching and cleanup threads; a task still running is left to run,
    unreported; a later task starts the watcher again."""
    exits = Exits()
    quick = subprocess.Popen(["true"])
    watcher.watch(child_watch(quick, exits))
    exits.wait(1)
    running = subprocess.Popen(["sleep", "30"])
    watcher.watch(child_watch(running, exits))
    thread = watcher.thread
    assert thread is not None and thread.is_alive()
    watcher.close()
    assert not thread.is_alive() and watcher.thread is None
    assert watcher.cleanup.threads == 0
    assert running.poll() is None
    running.kill()
    running.wait()
    again = subprocess.Popen(["sh", "-c", "exit 2"])
    watcher.watch(child_watch(again, exits))
    assert exits.wait(2)[again.pid] == 2


def test_the_thread_ends_when_idle(watcher: ExitWatcher, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watcher_module, "IDLE_SECONDS", 0.2)
    exits = Exits()
    watcher.watch(child_watch(subprocess.Popen(["true"]), exits))
    exits.wait(1)
    wait_for(lambda: watcher.thread is None, 5, "the idle watcher to end")


@pytest.mark.parametrize("failure", [errno.ENOSYS, errno.EMFILE], ids=["ENOSYS", "EMFILE"])
def test_tasks_are_polled_where_pidfd_open_fails(
    watcher: ExitWatcher, monkeypatch: pytest.MonkeyPatch, failure: int
) -> None:
    """Injects the failure: os.pidfd_open raises (a kernel without pidfds, or the open-file
    limit reached), and every task is polled instead, its exit reported once as ever."""

    def refused(pid: int, flags: int = 0) -> int:
        raise OSError(failure, os.strerror(failure))

    monkeypatch.setattr(os, "pidfd_open", refused)
    exits = Exits()
    expected = {}
    for n in range(20):
        process = subprocess.Popen(["sh", "-c", f"sleep {n % 5 / 10}; exit {n % 3}"])
        expected[process.pid] = n % 3
        watcher.watch(child_watch(process, exits))
    killed = subprocess.Popen(["sleep", "30"])
    watcher.watch(child_watch(killed, exits))
    killed.kill()
    expected[killed.pid] = -signal.SIGKILL
    assert exits.wait(21) == expected
    time.sleep(0.6)
    assert len(exits.seen) == 21


def test_a_failing_cleanup_reports_the_others(watcher: ExitWatcher) -> None:
    exits = Exits()

    def broken(code: int) -> None:
        raise RuntimeError("a cleanup that fails")

    first = subprocess.Popen(["true"])
    watcher.watch(Watch(first.pid, first.poll, lambda: False, broken))
    second = subprocess.Popen(["sh", "-c", "exit 1"])
    watcher.watch(child_watch(second, exits))
    assert exits.wait(1) == {second.pid: 1}
