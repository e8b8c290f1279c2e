"""No job is stuck in ``starting``: a fault at any step of a job's start (its controller,
its environment, its secret files, its folder, its ports, the backend's start, the step
after its tasks started) ends the job ``failed`` with the fault named, leaves no process
running, and the job can be deleted. And a job whose controller is gone is still ended
by ``cancel`` and ``delete(force=True)``, whoever asks.

The faults are injected (monkeypatched) into the real engine, store and backend: no real
failure of these steps can be made to happen on demand.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from helpers import wait_for

from trainfleet.backends.launch import JobLaunch
from trainfleet.control.assembly import engine_at
from trainfleet.control.controller import JobController
from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code, Condition
from trainfleet.domain.records import State
from trainfleet.environments.cache import EnvironmentCache
from trainfleet.spec.models import JobSpec

MARK = "3119"
"""In the tasks' command line: a process left behind is found by it."""


class Injected(RuntimeError):
    """The fault a test injects."""


def _boom(*args: object, **kwargs: object) -> None:
    raise Injected("injected fault")


def _spec(environment: bool = False) -> JobSpec:
    text = (
        f"name: faults\ngrace_period: 1\nroles:\n  worker: {{replicas: 2, command: sleep {MARK}}}\n"
    )
    if environment:
        text += "environment: {pip: [six]}\n"
    return JobSpec.model_validate(yaml.safe_load(text))


def _left_running() -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", MARK.encode()]:
                found.append(int(proc.name))
    return found


def _after_start(self: JobController) -> None:
    raise Injected("injected fault after the tasks started")


STEPS: dict[str, Callable[[pytest.MonkeyPatch, Engine], None]] = {
    "controller": lambda mp, engine: mp.setattr(engine, "_controller_of", _boom),
    "environment": lambda mp, engine: mp.setattr(EnvironmentCache, "lease", _boom),
    "secret files": lambda mp, engine: mp.setattr(JobLaunch, "write_secret_files", _boom),
    "workdir": lambda mp, engine: mp.setattr(JobController, "_hand_over", _boom),
    "ports": lambda mp, engine: mp.setattr(engine.backend, "reserve", _boom),
    "backend start": lambda mp, engine: mp.setattr(engine.backend, "start", _boom),
    "after start": lambda mp, engine: mp.setattr(JobController, "_mark_running", _after_start),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_fault_at_any_step_of_a_start_fails_the_job(
    step: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    STEPS[step](monkeypatch, engine)
    job = engine.submit(_spec(environment=step == "environment"), tmp_path, start=True)
    began = time.monotonic()
    assert engine.wait_ended(job.id, timeout=5), engine.describe(job.id)
    assert time.monotonic() - began < 5
    ended = engine.get(job.id)
    assert ended.state == State.FAILED, engine.describe(job.id)
    assert ended.reason.startswith("internal error: ") and "injected fault" in ended.reason
    assert ended.code == Code.INTERNAL_ERROR
    assert all(State(task.state).is_final for task in engine.tasks(job.id))
    wait_for(lambda: not _left_running(), timeout=10, what="no task left running")
    engine.delete(job.id)
    assert engine.store.get_job(job.id) is None


def test_a_job_whose_controller_is_gone_is_ended_by_stop_and_delete(
    data_dir: Path, tmp_path: Path
) -> None:
    """A server's job left ``starting`` with no controller (its thread died without a
    word, as a bug could make it): ``cancel`` takes it over and ends what is left of its
    tasks, and ``delete(force=True)`` of another such job does too."""
    engine = engine_at(data_dir, supervised=True)
    try:
        stuck = []
        for _ in range(2):
            job = engine.submit(_spec(), tmp_path)
            admitted = Condition(Code.ADMITTED)
            engine.store.transition(job.id, State.STARTING, admitted, started_at=time.time())
            stuck.append(job.id)
        cancelled = engine.cancel(stuck[0], "stop it")
        assert cancelled.state == State.CANCELLED and cancelled.finished_at is not None
        assert all(t.state == State.CANCELLED for t in engine.tasks(stuck[0]))
        engine.delete(stuck[1], force=True)
        assert engine.store.get_job(stuck[1]) is None
    finally:
        engine.store.close()
