"""``trainfleet run``'s Ctrl-C and SIGTERM at the moments no real run can aim at: while its
first line is being written (a reader that acts on that line may signal at once), and in
the middle of the engine's work, holding a lock. The service is a stand-in recording what
the view asks of it: the moment needs the signal inside the view's own call, which no server
or engine can time."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from trainfleet.cli.run_view import RunView
from trainfleet.domain.records import State


class Service:
    """What ``RunView`` asks of a job's service, for a job that runs until interrupted."""

    poll_interval = 0.01

    def __init__(self) -> None:
        self.interrupted = False
        self.deadline = time.monotonic() + 30

    def tasks(self, job_id: str) -> list[object]:
        return []

    def links(self, job_id: str) -> list[object]:
        return []

    def events(self, job_id: str, after: int) -> list[object]:
        return []

    def attach(self, job_id: str) -> str:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the first line is made
        return "runs here"

    def interrupt(self, job_id: str) -> None:
        self.interrupted = True

    def wait(self, job_id: str, timeout: float) -> bool:
        if time.monotonic() > self.deadline:  # the job would run on for ever
            raise AssertionError("the Ctrl-C never reached the view: the job was not stopped")
        return self.interrupted

    def get(self, job_id: str) -> SimpleNamespace:
        state = State.CANCELLED if self.interrupted else State.RUNNING
        return SimpleNamespace(id=job_id, state=state.value, reason="cancelled by user")

    def event_dir(self, job_id: str) -> None:
        return None


def test_ctrl_c_as_the_first_line_is_written_stops_the_job_and_exits_130(capfd) -> None:
    service = Service()
    try:
        code = RunView(service, "sleeper-1", show_logs=False).run()  # type: ignore[arg-type]
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C went past the view: the job would run on, and the exit be 1")
    assert code == 130
    assert service.interrupted
    assert "stopping the job" in capfd.readouterr().out


class LockingService(Service):
    """A job whose every wait holds a lock, as the embedded engine's store does, and is
    signalled (SIGTERM: another process's stop) in the middle of it."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.signalled = False

    def attach(self, job_id: str) -> str:
        return "runs here"

    def wait(self, job_id: str, timeout: float) -> bool:
        if not self.lock.acquire(timeout=5):
            raise AssertionError("the lock stayed held: the signal was raised inside the work")
        if not self.signalled:
            self.signalled = True
            os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # Python code, where a raising handler would run
            pass
        self.lock.release()
        return super().wait(job_id, timeout)


def test_a_stop_signalled_amid_the_engine_s_work_leaves_it_whole_and_stops_the_job(capfd) -> None:
    """A KeyboardInterrupt raised where the signal lands would leave the lock held: the
    job, told to stop, could then never end (a CI run hung on this)."""
    service = LockingService()
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = RunView(service, "sleeper-1", show_logs=False).run()  # type: ignore[arg-type]
    except KeyboardInterrupt:
        pytest.fail("the signal was raised inside the engine's work: its lock stayed held")
    assert not service.lock.locked()
    assert code == 130 and service.interrupted
    assert capfd.readouterr().out.count("stopping the job") == 1
    assert {number: signal.getsignal(number) for number in before} == before  # put back
