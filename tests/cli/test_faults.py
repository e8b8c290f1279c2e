"""Fault tests with real processes: kill -9, restart policies, teardown, Ctrl-C, deadlines."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import process_group_alive, trainfleet, wait_for

from trainfleet.control.engine import Engine
from trainfleet.domain.conditions import Code
from trainfleet.domain.records import State, TaskRecord

PROGRAMS = Path(__file__).parent.parent / "programs"
SERVE = PROGRAMS / "serve.py"


def _start(job: Path) -> subprocess.Popen[str]:
    shutil.copy(SERVE, job.parent / "serve.py")
    return subprocess.Popen(
        trainfleet("run", job), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _job_id(engine: Engine) -> str:
    jobs = wait_for(engine.list, what="the job to be stored")
    assert isinstance(jobs, list)
    return str(jobs[0].id)


def _task(engine: Engine, job_id: str, name: str) -> TaskRecord:
    return next(t for t in engine.tasks(job_id) if t.name == name)


def _all_running(engine: Engine, job_id: str) -> Callable[[], bool]:
    return lambda: all(t.state == State.RUNNING for t in engine.tasks(job_id))


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


def test_killed_worker_restarts_on_same_port_and_job_succeeds(
    engine: Engine, job_file, tmp_path: Path
) -> None:
    job = job_file(
        """
        name: faults
        restart: {policy: on-failure, max_restarts: 2, backoff: {initial: 0.1}}
        roles:
          chief: {command: python serve.py DONE}
          worker: {replicas: 2, command: python serve.py DONE}
        """
    )
    run = _start(job)
    job_id = _job_id(engine)
    wait_for(_all_running(engine, job_id), what="every task running")
    before = _task(engine, job_id, "worker/1")
    wait_for(lambda: _listening(before.address), what="worker/1 listening")
    assert before.pid is not None
    os.kill(before.pid, signal.SIGKILL)

    after = wait_for(
        lambda: (
            (t := _task(engine, job_id, "worker/1")).restarts == 1
            and t.state == State.RUNNING
            and t
        ),
        what="worker/1 restarted",
    )
    assert isinstance(after, TaskRecord)
    assert after.pid != before.pid
    assert after.address == before.address
    wait_for(
        lambda: _listening(after.address), what="the restarted worker/1 listening on its old port"
    )

    (tmp_path / "DONE").touch()
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 0, output
    details = engine.describe(job_id)
    assert details.job.state == State.SUCCEEDED
    assert any(
        e.task == "worker/1"
        and e.state == State.RESTARTING
        and "exit code 137 (SIGKILL)" in e.message
        for e in details.events
    )
    assert output.count("listening on " + before.address) == 2


FAILS_FIRST = """
import os, pathlib, socket, sys, time
port, index = int(os.environ["TRAINFLEET_PORT"]), os.environ["TRAINFLEET_INDEX"]
if not pathlib.Path(f"port.{index}").exists():  # the test takes the port; this attempt fails
    pathlib.Path(f"port.{index}").write_text(str(port))
    while not pathlib.Path(f"held.{index}").exists():
        time.sleep(0.05)
    sys.exit(1)
server = socket.socket()
server.bind(("", port))  # raises (exit 1) where the port is still the other program's
server.listen()
"""


def _run_taking_each_failed_task_s_port(job: Path, folder: Path) -> set[int]:
    """``trainfleet run job`` of FAILS_FIRST tasks, this test taking each task's port as
    its first attempt fails (as another program of the node would); the ports it took."""
    run = subprocess.Popen(trainfleet("run", job), stdout=subprocess.PIPE, text=True)
    held: dict[str, socket.socket] = {}
    try:
        while run.poll() is None:
            for told in folder.glob("port.*"):
                if told.suffix not in held and told.read_text():
                    held[told.suffix] = socket.create_server(("", int(told.read_text())))
                    (folder / f"held{told.suffix}").touch()
            time.sleep(0.05)
        assert run.returncode == 0, run.communicate()[0]
        return {server.getsockname()[1] for server in held.values()}
    finally:
        run.kill()
        for server in held.values():
            server.close()


@pytest.mark.parametrize("scope", ["job", "task"])
def test_a_job_restarts_at_fresh_ports_where_its_old_ones_were_taken(
    engine: Engine, job_file, tmp_path: Path, scope: str
) -> None:
    """Another program of the node took a task's port (a connection's ephemeral port, as
    in a CI run on Slurm; here: this test, as each task fails). At its old ports every
    attempt would fail; the whole job restarts at new ones. With scope task too: the task
    alone would fail at its port every time (its peers know it there only). A task whose
    port is free restarts alone at it (test_killed_worker_restarts_on_same_port_...)."""
    (tmp_path / "fails_first.py").write_text(FAILS_FIRST)
    job = job_file(
        f"""
        name: taken
        restart: {{policy: on-failure, scope: {scope}, max_restarts: 2, backoff: {{initial: 0.1}}}}
        roles:
          worker: {{replicas: 2, command: python fails_first.py}}
        """
    )
    taken = _run_taking_each_failed_task_s_port(job, tmp_path)
    (job_id,) = (job.id for job in engine.list())
    tasks = engine.tasks(job_id)
    assert len(taken) == 2 and all(t.state == State.SUCCEEDED and t.restarts for t in tasks)
    assert not taken & {int(t.address.rsplit(":", 1)[1]) for t in tasks}
    if scope == "task":  # the task's event says why the whole job restarted
        said = [e.message for e in engine.describe(job_id).events if "was taken" in e.message]
        assert said and "by another program; restarting the job" in said[0], said


def test_job_scope_restarts_every_task_together(engine: Engine, job_file, tmp_path: Path) -> None:
    """scope: job (the default of static torchrun groups): one failure restarts all tasks."""
    job = job_file(
        """
        name: gang
        grace_period: 1
        restart: {policy: on-failure, scope: job, max_restarts: 2, backoff: {initial: 0.1}}
        roles:
          chief: {command: python serve.py DONE}
          worker: {replicas: 2, command: python serve.py DONE}
          ps: {command: python serve.py --ignore-term}
        """
    )
    run = _start(job)
    job_id = _job_id(engine)
    wait_for(_all_running(engine, job_id), what="every task running")
    before = {t.name: t for t in engine.tasks(job_id)}
    for task in before.values():  # listening: ps has set its SIGTERM handler
        wait_for(lambda task=task: _listening(task.address), what=f"{task.name} listening")
    victim = before["worker/1"].pid
    assert victim is not None
    os.kill(victim, signal.SIGKILL)

    wait_for(
        lambda: all(t.restarts == 1 and t.state == State.RUNNING for t in engine.tasks(job_id)),
        what="every task restarted once",
    )
    for name, old in before.items():
        assert old.pid is not None and not process_group_alive(old.pid), f"old {name} survived"
    after = {t.name: t for t in engine.tasks(job_id)}
    for name, old in before.items():  # each at a fresh port, where it listens now
        assert after[name].address != old.address, name
        wait_for(lambda t=after[name]: _listening(t.address), what=f"{name} at its new port")

    (tmp_path / "DONE").touch()
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 0, output
    events = engine.describe(job_id).events
    assert any(
        e.task == "worker/1"
        and e.code == Code.PROGRAM_FAILED
        and re.fullmatch(
            r"exit code 137 \(SIGKILL\) on \S+ \(pid \d+\); restarting the job", e.message
        )
        for e in events
    )
    # ps ignores SIGTERM: the restart waits for its SIGKILL, so no two attempts overlap.
    assert any(
        e.task == "ps/0" and e.message == "exit code 137 (SIGKILL); restarting with worker/1"
        for e in events
    )
    assert engine.get(job_id).state == State.SUCCEEDED


def test_a_torchrun_group_recovers_from_a_crashed_node(engine: Engine, job_file) -> None:
    """Real torchrun nodes: one crashes midway, the whole group restarts and finishes."""
    pytest.importorskip("torch")
    job = job_file(
        """
        name: torch-crash
        framework: pytorch
        grace_period: 5
        restart: {policy: on-failure, max_restarts: 1, backoff: {initial: 0}}
        roles:
          master: {command: torchrun torch_crash_once.py}
          worker: {replicas: 2, command: torchrun torch_crash_once.py}
        """
    )
    shutil.copy(PROGRAMS / "torch_crash_once.py", job.parent)
    result = subprocess.run(
        trainfleet("run", job), capture_output=True, text=True, cwd=job.parent, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^worker/0 +\| rank 1 crashes$", result.stdout, re.MULTILINE)
    assert re.search(r"^master/0 +\| done: 3 ranks, sum=30$", result.stdout, re.MULTILINE)
    tasks = engine.tasks(_job_id(engine))
    assert [t.restarts for t in tasks] == [1, 1, 1]
    assert all(t.state == State.SUCCEEDED for t in tasks)


def test_killed_worker_fails_job_under_never(engine: Engine, job_file) -> None:
    job = job_file(
        """
        name: never
        grace_period: 2
        roles:
          chief: {command: python serve.py}
          worker: {replicas: 2, command: python serve.py}
        """
    )
    run = _start(job)
    job_id = _job_id(engine)
    wait_for(_all_running(engine, job_id), what="every task running")
    victim = _task(engine, job_id, "worker/1")
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)

    output, _ = run.communicate(timeout=60)
    assert run.returncode == 1, output
    job_record = engine.get(job_id)
    assert job_record.state == State.FAILED
    assert job_record.reason == "worker/1 exited with exit code 137 (SIGKILL)"
    assert "worker/1 exited with exit code 137 (SIGKILL)" in output
    for task in engine.tasks(job_id):
        assert task.state in (State.FAILED, State.CANCELLED)
        assert task.pid is not None and not process_group_alive(task.pid)


def test_parameter_servers_stop_when_client_succeeds(engine: Engine, job_file) -> None:
    job = job_file(
        """
        name: teardown
        grace_period: 1
        roles:
          ps: {command: python serve.py}
          stubborn: {command: [python, serve.py, --ignore-term], tracked: false}
          saver: {command: python serve.py --save-on-term || true, tracked: false}
          client: {command: "sleep 0.5; echo trained"}
        """
    )
    run = _start(job)
    job_id = _job_id(engine)
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 0, output
    assert re.search(r"^client/0 +\| trained$", output, re.MULTILINE)
    # The shell around saver dies at once on SIGTERM; its python still gets to checkpoint.
    assert re.search(r"^saver/0 +\| saved on SIGTERM$", output, re.MULTILINE)
    tasks = {t.name: t for t in engine.tasks(job_id)}
    assert tasks["client/0"].state == State.SUCCEEDED
    # ps obeys SIGTERM; stubborn ignores it and is killed when the grace period ends.
    assert tasks["ps/0"].exit_code == 128 + signal.SIGTERM
    assert tasks["stubborn/0"].exit_code == 128 + signal.SIGKILL
    for name in ("ps/0", "stubborn/0", "saver/0"):
        assert tasks[name].state == State.SUCCEEDED
        assert tasks[name].reason == "stopped: training finished"
        assert tasks[name].pid is not None and not process_group_alive(tasks[name].pid)
    assert tasks["stubborn/0"].finished_at is not None and tasks["client/0"].finished_at is not None
    waited = tasks["stubborn/0"].finished_at - tasks["client/0"].finished_at
    assert 1 <= waited < 10, "the stubborn server is killed when the 1 s grace period ends"


def test_ctrl_c_leaves_no_process_behind(engine: Engine, job_file) -> None:
    job = job_file(
        """
        name: interrupted
        grace_period: 1
        roles:
          ps: {command: python serve.py --ignore-term}
          worker: {replicas: 2, command: "sleep 600 & sleep 600 & python serve.py"}
        """
    )
    run = _start(job)
    job_id = _job_id(engine)
    wait_for(_all_running(engine, job_id), what="every task running")
    groups = [t.pid for t in engine.tasks(job_id)]
    wait_for(
        lambda: all(_listening(t.address) for t in engine.tasks(job_id)), what="tasks listening"
    )
    run.send_signal(signal.SIGINT)
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 130, output
    for pgid in groups:
        assert pgid is not None and not process_group_alive(pgid), f"process group {pgid} survived"
    assert engine.get(job_id).state == State.CANCELLED
    assert all(t.state == State.CANCELLED for t in engine.tasks(job_id))


def test_job_over_its_deadline_is_stopped_and_failed(engine: Engine, job_file) -> None:
    job = job_file(
        """
        name: slow
        deadline: 1
        roles:
          worker: {replicas: 2, command: sleep 600}
        """
    )
    started = time.monotonic()
    run = _start(job)
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 1, output
    assert time.monotonic() - started < 30
    job_id = _job_id(engine)
    assert engine.get(job_id).reason == "deadline exceeded: 1s"
    assert engine.get(job_id).code == Code.DEADLINE_EXCEEDED
    for task in engine.tasks(job_id):
        assert task.state == State.CANCELLED
        assert task.pid is not None and not process_group_alive(task.pid)


def test_restart_policies_exit_code_max_restarts_and_always(engine: Engine, job_file) -> None:
    # exit-code: killed by a signal (137) is retried, a plain exit 1 is permanent.
    job = job_file(
        """
        name: codes
        restart: {policy: exit-code, max_restarts: 5, backoff: {initial: 0.05}}
        roles:
          worker: {command: 'if [ -e once ]; then exit 1; fi; touch once; kill -9 $$'}
        """
    )
    result = subprocess.run(trainfleet("run", job), capture_output=True, text=True, cwd=job.parent)
    assert result.returncode == 1, result.stdout
    worker = engine.tasks(_job_id(engine))[0]
    assert worker.restarts == 1
    assert worker.reason == "exited with exit code 1 after 1 restart(s)"

    # on-failure gives up after max_restarts, waiting the backoff in between.
    job = job_file(
        """
        name: flaky
        restart: {policy: on-failure, max_restarts: 2, backoff: {initial: 0.1, factor: 2}}
        roles:
          worker: {command: 'exit 7'}
        """,
        name="flaky.yaml",
    )
    result = subprocess.run(trainfleet("run", job), capture_output=True, text=True)
    assert result.returncode == 1
    assert "restarting in 0.1s" in result.stdout and "restarting in 0.2s" in result.stdout
    assert "worker/0 exited with exit code 7 after 2 restart(s)" in result.stdout

    # always restarts even a clean exit, until the job's success is reached.
    job = job_file(
        """
        name: always
        restart: {policy: always, max_restarts: 10, backoff: {initial: 0}}
        success: [chief]
        roles:
          chief: {command: 'while [ ! -e a_twice ]; do sleep 0.05; done'}
          server: {command: 'if [ -e a_once ]; then touch a_twice; else touch a_once; fi; exit 0'}
        """,
        name="always.yaml",
    )
    result = subprocess.run(trainfleet("run", job), capture_output=True, text=True, cwd=job.parent)
    assert result.returncode == 0, result.stdout
    server = next(t for t in engine.tasks(engine.list(limit=1)[0].id) if t.role == "server")
    assert server.restarts >= 1
