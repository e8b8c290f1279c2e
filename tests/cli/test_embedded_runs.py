"""Embedded runs side by side and dying: SIGKILL, SIGHUP, two runs wanting one machine.

Real ``trainfleet run`` processes on one data directory. ``TRAINFLEET_GPUS=0`` stands in
for a machine with one GPU (there is none here); the tasks only see the index they get.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from helpers import process_group_alive, run_cli, trainfleet, wait_for

from trainfleet.backends.local.groups import live_members
from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code
from trainfleet.domain.records import JobRecord, State

pytestmark = pytest.mark.usefixtures("reap")  # a failed test's runs and tasks are killed

SERVE = Path(__file__).parent.parent / "programs" / "serve.py"
STUBBORN = """
    name: {name}
    grace_period: 1
    roles:
      ps: {{command: python serve.py --ignore-term}}
      worker: {{replicas: 2, command: "sleep 600 & sleep 600 & python serve.py"}}
"""


def _start(job: Path) -> subprocess.Popen[str]:
    shutil.copy(SERVE, job.parent / "serve.py")
    return subprocess.Popen(
        trainfleet("run", job), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _job(engine: Engine, name: str) -> JobRecord:
    found = wait_for(
        lambda: next((job for job in engine.list() if job.name == name), None),
        what=f"job {name} stored",
    )
    assert isinstance(found, JobRecord)
    return found


def _until_waiting(engine: Engine, job_id: str, run: subprocess.Popen[str], says: str) -> None:
    """Wait until the job waits saying ``says``; else fail with what it and its run said."""
    try:
        wait_for(lambda: engine.get(job_id).waiting == says, what="the job waiting")
    except AssertionError:
        run.kill()
        output, _ = run.communicate(timeout=60)
        job = engine.get(job_id)
        events = "\n".join(f"{e.task} {e.state}: {e.message}" for e in engine.events(job_id))
        jobs = ", ".join(f"{other.id} {other.state}" for other in engine.list())
        raise AssertionError(
            f"job {job_id} is {job.state}, waiting {job.waiting!r}, not {says!r}\n"
            f"the jobs: {jobs}\n"
            f"its events:\n{events}\nits run said:\n{output}"
        ) from None


def _running_groups(engine: Engine, job_id: str) -> list[int]:
    """Once every task runs: their process groups."""
    wait_for(
        lambda: all(t.state == State.RUNNING for t in engine.tasks(job_id)),
        what="every task running",
    )
    groups = [t.pid for t in engine.tasks(job_id)]
    assert all(groups)
    return [pid for pid in groups if pid is not None]


def test_killed_run_takes_its_tasks_along_and_its_job_is_lost(
    engine: Engine, job_file, data_dir: Path
) -> None:
    run = _start(job_file(STUBBORN.format(name="killed")))
    job_id = _job(engine, "killed").id
    groups = _running_groups(engine, job_id)

    run.kill()
    run.communicate(timeout=60)

    # Tethered: SIGTERM, the 1 s grace period, SIGKILL for what ignores SIGTERM.
    wait_for(
        lambda: not any(process_group_alive(pgid) for pgid in groups),
        timeout=30,
        what="every task of the killed run gone",
    )
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    job = engine.get(job_id)
    assert job.state == State.FAILED
    assert job.reason == f"lost: the trainfleet process running it ended (pid {run.pid})"
    assert all(t.state == State.FAILED for t in engine.tasks(job_id))

    stopped = run_cli("stop", job_id)
    assert stopped.returncode == 0, stopped.stderr
    deleted = run_cli("delete", job_id)
    assert deleted.returncode == 0, deleted.stderr
    assert job_id not in run_cli("list").stdout


def test_a_lost_jobs_tasks_are_ended_even_when_their_shims_died_too(
    engine: Engine, job_file, data_dir: Path
) -> None:
    """kill -9 of the run and then of every task's shim, inside the tethered grace period:
    the tasks (which ignore SIGTERM and write nothing) outlive both, and the next command
    that finds the job lost ends them."""
    orphans = """
        name: orphaned
        grace_period: 600
        roles:
          worker: {replicas: 2, command: "trap '' TERM; sleep 600 & sleep 600"}
    """
    run = _start(job_file(orphans))
    job_id = _job(engine, "orphaned").id
    groups = _running_groups(engine, job_id)
    # The shell, its two sleeps and the shim: the trap is set (a busy machine may be slower).
    wait_for(
        lambda: all(len(live_members(pgid)) >= 4 for pgid in groups),
        what="every task's trap set and its sleeps started",
    )

    run.kill()
    run.communicate(timeout=60)
    for shim in groups:  # each task's shim leads its group
        os.kill(shim, signal.SIGKILL)
    assert all(process_group_alive(pgid) for pgid in groups)

    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    assert engine.get(job_id).state == State.FAILED
    wait_for(
        lambda: not any(process_group_alive(pgid) for pgid in groups),
        timeout=10,
        what="every orphaned task of the lost job gone",
    )


def test_sighup_stops_the_run_like_ctrl_c(engine: Engine, job_file) -> None:
    run = _start(job_file(STUBBORN.format(name="hungup")))
    job_id = _job(engine, "hungup").id
    groups = _running_groups(engine, job_id)

    run.send_signal(signal.SIGHUP)
    output, _ = run.communicate(timeout=60)

    assert run.returncode == 130, output
    for pgid in groups:
        assert not process_group_alive(pgid), f"process group {pgid} survived"
    assert engine.get(job_id).state == State.CANCELLED


def test_a_closed_terminal_stops_the_run_like_ctrl_c(engine: Engine, job_file) -> None:
    """The run's controlling terminal is a real pseudo-terminal: closing its master end is
    what closing a terminal window does (SIGHUP, and writes to it fail from then on)."""
    job = job_file(STUBBORN.format(name="closed"))
    shutil.copy(SERVE, job.parent / "serve.py")
    master, terminal = os.openpty()
    run = subprocess.Popen(
        ["setsid", "--ctty", *trainfleet("run", job)],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    stop_reading = threading.Event()
    reader = threading.Thread(target=_drain, args=(master, stop_reading), daemon=True)
    reader.start()
    try:
        job_id = _job(engine, "closed").id
        groups = _running_groups(engine, job_id)
    finally:
        stop_reading.set()
        reader.join()
        os.close(master)

    assert run.wait(timeout=60) == 130
    for pgid in groups:
        assert not process_group_alive(pgid), f"process group {pgid} survived"
    assert engine.get(job_id).state == State.CANCELLED


def _drain(master: int, stop: threading.Event) -> None:
    """Read what the run shows on its terminal, so that it never blocks on a full one."""
    while not stop.is_set():
        if select.select([master], [], [], 0.05)[0]:
            try:
                os.read(master, 65536)
            except OSError:  # the run closed its end
                return


WHOLE_MACHINE = {
    "gpu": "gpu: 1",
    "cpu": f"cpu: {os.cpu_count()}",
}


def _machine_job(job_file, name: str, resources: str, done: str = "DONE") -> Path:
    return job_file(
        f"""
        name: {name}
        roles:
          worker: {{command: python serve.py {done}, resources: {{{resources}}}}}
        """,
        name=f"{name}.yaml",
    )


@pytest.mark.parametrize("wanted", sorted(WHOLE_MACHINE))
def test_two_runs_wanting_the_whole_machine_take_turns(
    engine: Engine, job_file, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wanted: str
) -> None:
    monkeypatch.setenv("TRAINFLEET_GPUS", "0")  # one GPU, index 0
    first = _start(_machine_job(job_file, "first", WHOLE_MACHINE[wanted]))
    first_id = _job(engine, "first").id
    _running_groups(engine, first_id)

    second = _start(_machine_job(job_file, "second", WHOLE_MACHINE[wanted]))
    second_id = _job(engine, "second").id
    waiting = wait_for(
        lambda: "waiting for resources" in (job := engine.get(second_id)).waiting and job,
        what="the second run waiting",
    )
    assert isinstance(waiting, JobRecord)
    assert waiting.waiting == (
        f"waiting for resources: {wanted} held by job {first_id} of another trainfleet process"
    )
    assert waiting.waiting_code == Code.WAITING_FOR_RESOURCES
    assert engine.get(first_id).state == State.RUNNING
    assert all(t.pid is None for t in engine.tasks(second_id)), "both run at once"

    (tmp_path / "DONE").touch()
    first_output, _ = first.communicate(timeout=60)
    second_output, _ = second.communicate(timeout=60)

    assert first.returncode == 0, first_output
    assert second.returncode == 0, second_output
    assert f"waiting for resources: {wanted} held by job {first_id}" in second_output
    first_task, second_task = engine.tasks(first_id)[0], engine.tasks(second_id)[0]
    assert first_task.finished_at is not None and second_task.started_at is not None
    assert second_task.started_at >= first_task.finished_at
    if wanted == "gpu":
        assert first_task.gpus == second_task.gpus == "0"


def test_ctrl_c_cancels_a_run_waiting_for_another(engine: Engine, job_file, tmp_path: Path) -> None:
    first = _start(_machine_job(job_file, "first", WHOLE_MACHINE["cpu"]))
    first_id = _job(engine, "first").id
    _running_groups(engine, first_id)
    second = _start(_machine_job(job_file, "second", WHOLE_MACHINE["cpu"]))
    second_id = _job(engine, "second").id
    wait_for(
        lambda: "waiting for resources" in engine.get(second_id).waiting,
        what="the second run waiting",
    )

    second.send_signal(signal.SIGINT)
    second_output, _ = second.communicate(timeout=60)

    assert second.returncode == 130, second_output
    assert engine.get(second_id).state == State.CANCELLED
    assert all(t.pid is None for t in engine.tasks(second_id))
    assert engine.get(first_id).state == State.RUNNING
    (tmp_path / "DONE").touch()
    first_output, _ = first.communicate(timeout=60)
    assert first.returncode == 0, first_output


def test_a_submitted_job_and_a_run_take_turns_and_a_killed_waiter_is_lost(
    engine: Engine, job_file, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINFLEET_GPUS", "0")
    shutil.copy(SERVE, tmp_path / "serve.py")
    submitted = run_cli("submit", _machine_job(job_file, "first", WHOLE_MACHINE["gpu"]))
    assert submitted.returncode == 0, submitted.stderr
    first_id = _job(engine, "first").id
    _running_groups(engine, first_id)  # run by the background runner of `submit`
    second = _start(_machine_job(job_file, "second", WHOLE_MACHINE["gpu"]))
    second_id = _job(engine, "second").id
    _until_waiting(
        engine,
        second_id,
        second,
        f"waiting for resources: gpu held by job {first_id} of another trainfleet process",
    )

    second.kill()
    second.communicate(timeout=60)
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    lost = engine.get(second_id)
    assert lost.state == State.FAILED
    assert lost.reason == f"lost: the trainfleet process running it ended (pid {second.pid})"
    assert engine.get(first_id).state == State.RUNNING

    (tmp_path / "DONE").touch()
    wait_for(lambda: engine.get(first_id).state == State.SUCCEEDED, what="the first job done")


def test_a_server_started_beside_embedded_runs_leaves_their_jobs_alone(
    engine: Engine, job_file, tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINFLEET_GPUS", "0")
    first = _start(_machine_job(job_file, "first", WHOLE_MACHINE["gpu"]))
    first_id = _job(engine, "first").id
    _running_groups(engine, first_id)
    second = _start(_machine_job(job_file, "second", WHOLE_MACHINE["gpu"]))
    second_id = _job(engine, "second").id
    wait_for(
        lambda: "waiting for resources" in engine.get(second_id).waiting,
        what="the second run waiting",
    )

    server = engine_at(data_dir, supervised=True)  # what `trainfleet server` resumes
    try:
        assert server.resume() == []
        with server.admitter.lock:
            assert second_id not in server.scheduler.pending()
            assert second_id not in server.scheduler.admitted()
    finally:
        server.store.close()

    (tmp_path / "DONE").touch()
    for run in (first, second):
        output, _ = run.communicate(timeout=60)
        assert run.returncode == 0, output
