"""Workflow runs on a real server, through the SDK: steps hand their folder on, a failed
step is retried with its retries and then by hand (only what failed, or ``--from`` a
step), ``cancel-all`` and a stop end the running steps' jobs, and a server killed with
``kill -9`` mid-run (or while a step's job was being submitted) picks the run up
without running any step twice. A one-minute schedule runs once a minute, across a
``kill -9`` of its server."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for

from trainfleet.client import Client, Conflict
from trainfleet.domain.workflow_records import RunCode, RunRecord, RunState, StepState
from trainfleet.workflows.driver import RUN_LABEL, TRY_LABEL

ADMIN_TOKEN = "workflow-runs-admin-token-0123456789abcdef"
FLOW = """\
kind: Workflow
name: handoff
steps:
  make: {job: {roles: {worker: {command: "sh -c 'echo made > $TRAINFLEET_RUN_DIR/made.txt'"}}}}
  use: {file: use.yaml, needs: [make], retries: 1}
  alarm: {job: {roles: {worker: {command: "echo alarm"}}}, needs: [use], when: failure}
"""
USE = """\
name: use
roles:
  worker:
    command: "sh -c 'test -f $TRAINFLEET_RUN_DIR/go && cat $TRAINFLEET_RUN_DIR/made.txt'"
"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[object, Client]]:
    from server.harness import LiveServer

    server = LiveServer(tmp_path / "data").start()
    try:
        with Client(server.url, server.token, timeout=30) as client:
            yield server, client
    finally:
        server.stop()


def _folder(tmp_path: Path, flow: str, **files: str) -> Path:
    folder = tmp_path / "flow"
    folder.mkdir(exist_ok=True)
    (folder / "flow.yaml").write_text(flow)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder / "flow.yaml"


def _jobs(client: Client, run_id: str) -> dict[str, list[str]]:
    return {step.step: step.jobs for step in client.workflow_run(run_id).steps}


def test_a_failed_step_is_retried_then_rerun_by_hand_alone_or_from_a_step(
    live: tuple[object, Client], tmp_path: Path
) -> None:
    server, client = live
    submitted = client.submit_workflow(_folder(tmp_path, FLOW, **{"use.yaml": USE}))
    assert submitted.run is not None
    run = client.wait_run(submitted.run.id, 0.1)
    assert (run.run.state, run.run.code, run.run.reason) == (
        "failed",
        "step-failed",
        "step use failed",
    )
    steps = {step.step: step for step in run.steps}
    assert steps["make"].state == "succeeded" and len(steps["make"].jobs) == 1
    assert (
        steps["use"].state == "failed" and steps["use"].tries == 2 and len(steps["use"].jobs) == 2
    )
    assert steps["alarm"].state == "succeeded"  # the failure's handler ran
    job = client.get(steps["use"].jobs[-1])
    assert job.labels[RUN_LABEL] == run.run.id and job.labels[TRY_LABEL] == "2"
    run_dir = server.engine.data_dir.root / "workflows" / "runs" / run.run.id  # type: ignore[attr-defined]
    (run_dir / "go").touch()
    again = client.retry_run(run.run.id)
    assert again.run.code == RunCode.RETRIED and again.run.retries == 1
    done = client.wait_run(run.run.id, 0.1)
    assert done.run.state == RunState.SUCCEEDED
    jobs = _jobs(client, run.run.id)
    assert len(jobs["make"]) == 1 and len(jobs["use"]) == 3 and len(jobs["alarm"]) == 1
    assert client.read_log(jobs["use"][-1], "worker", 0) == b"made\n"
    client.retry_run(run.run.id, start_from="make")
    done = client.wait_run(run.run.id, 0.1)
    states = {step.step: step.state for step in done.steps}
    assert done.run.state == "succeeded" and states == {
        "make": "succeeded",
        "use": "succeeded",
        "alarm": "skipped",  # nothing failed this time
    }
    assert [len(jobs) for jobs in _jobs(client, run.run.id).values()] == [2, 4, 1]


def test_cancel_all_and_a_stop_end_the_running_steps_jobs(
    live: tuple[object, Client], tmp_path: Path
) -> None:
    _, client = live
    flow = (
        "kind: Workflow\nname: stops\non_failure: cancel-all\nsteps:\n"
        "  long: {job: {roles: {worker: {command: 'sleep 60'}}}}\n"
        "  bad: {job: {roles: {worker: {command: 'sh -c \"sleep 1; exit 3\"'}}}}\n"
    )
    submitted = client.submit_workflow(_folder(tmp_path, flow), send_folder=False)
    assert submitted.run is not None
    run = client.wait_run(submitted.run.id, 0.1)
    steps = {step.step: step for step in run.steps}
    assert run.run.state == "failed" and steps["bad"].state == "failed"
    assert steps["long"].state == "cancelled"
    assert client.get(steps["long"].jobs[0]).state == "cancelled"
    other = client.run_workflow("default", "stops", {})
    wait_for(lambda: _jobs(client, other.id)["long"], 30, "the long step to start")
    stopped = client.stop_run(other.id)
    assert (stopped.run.state, stopped.run.code) == (RunState.CANCELLED, RunCode.STOPPED)
    assert {step.state for step in stopped.steps} == {StepState.CANCELLED}
    job = _jobs(client, other.id)["long"][0]
    wait_for(lambda: client.get(job).state == "cancelled", 30, "the long step's job to stop")


def test_a_step_whose_job_is_cancelled_by_hand_fails_its_run(
    live: tuple[object, Client], tmp_path: Path
) -> None:
    _, client = live
    long = "{job: {roles: {worker: {command: 'sleep 60'}}}}"
    flow = f"kind: Workflow\nname: hand\nsteps:\n  long: {long}\n"
    run = client.submit_workflow(_folder(tmp_path, flow), send_folder=False).run
    assert run is not None
    wait_for(lambda: _jobs(client, run.id)["long"], 30, "the step's job")
    client.cancel(_jobs(client, run.id)["long"][0])
    done = client.wait_run(run.id, 0.1)
    assert (done.run.state, done.run.reason) == ("failed", "step long cancelled")


def test_old_runs_give_back_their_folders_then_their_records(
    live: tuple[object, Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainfleet.workflows import driver

    monkeypatch.setattr(driver, "FOLDERS_KEPT", 1)
    monkeypatch.setattr(driver, "RUNS_KEPT", 2)
    server, client = live
    runs_dir = server.engine.data_dir.root / "workflows" / "runs"  # type: ignore[attr-defined]
    flow = "kind: Workflow\nname: kept\nsteps:\n  a: {job: {roles: {worker: {command: 'true'}}}}\n"
    first = client.submit_workflow(_folder(tmp_path, flow), send_folder=False).run
    assert first is not None
    runs = [first.id]
    for _ in range(2):
        client.wait_run(runs[-1], 0.1)
        runs.append(client.run_workflow("default", "kept").id)
    client.wait_run(runs[-1], 0.1)
    wait_for(lambda: not (runs_dir / runs[1]).exists(), 10, "the 2nd run's folder to go")
    assert [run.id for run in client.workflow_runs("default", "kept")] == runs[:0:-1]
    assert (runs_dir / runs[2]).is_dir() and not (runs_dir / runs[0]).exists()
    with pytest.raises(Conflict, match="gave its folder back"):
        client.retry_run(runs[1], start_from="a")


def test_bad_input_stores_nothing(live: tuple[object, Client], tmp_path: Path) -> None:
    from trainfleet.client import BadRequest

    _, client = live
    cycle = (
        "kind: Workflow\nname: c\nsteps:\n  a: {job: {}, needs: [b]}\n  b: {job: {}, needs: [a]}\n"
    )
    with pytest.raises(BadRequest, match=r"flow\.yaml:4: steps\.a\.needs: a cycle: a -> b -> a"):
        client.submit_workflow(_folder(tmp_path, cycle), send_folder=False)
    with pytest.raises(BadRequest, match=r"--param nope: no such parameter \(parameters: none\)"):
        client.submit_workflow(_folder(tmp_path, FLOW), params={"nope": "1"}, send_folder=False)
    broken = "name: broken\nroles: {worker: {replicas: -1, command: 'true'}}\n"
    flow = "kind: Workflow\nname: b\nsteps:\n  a: {file: broken.yaml}\n"
    path = _folder(tmp_path, flow, **{"broken.yaml": broken})
    with pytest.raises(BadRequest) as refused:
        client.submit_workflow(path)
    assert str(refused.value).startswith(f"{path.parent}/broken.yaml:2: roles.worker.replicas: ")
    with pytest.raises(BadRequest, match=r"steps\.a\.file: broken\.yaml cannot be read: no folder"):
        client.submit_workflow(path, send_folder=False)  # the server's paths are never told
    assert client.workflows() == []


def _server(data: Path) -> object:
    from server.harness import ServerProcess

    return ServerProcess(data, env={"TRAINFLEET_ADMIN_TOKEN": ADMIN_TOKEN})


def test_a_server_killed_mid_run_picks_the_run_up_without_a_step_run_twice(
    tmp_path: Path,
) -> None:
    flow = (
        "kind: Workflow\nname: killed\nsteps:\n"
        "  first: {job: {roles: {worker: {command: 'sleep 4'}}}}\n"
        "  second: {job: {roles: {worker: {command: 'true'}}}, needs: [first]}\n"
    )
    data = tmp_path / "data"
    server = _server(data)
    try:
        with Client(server.url, ADMIN_TOKEN) as client:  # type: ignore[attr-defined]
            run = client.submit_workflow(_folder(tmp_path, flow), send_folder=False).run
            assert run is not None
            wait_for(lambda: _jobs(client, run.id)["first"], 30, "the first step's job")
    finally:
        server.stop(signal.SIGKILL)  # type: ignore[attr-defined]
    # As if it had been killed between writing a step `starting` and storing its job: the
    # job is stored (with its labels), the step does not name it yet.
    from trainfleet.datadir.layout import DataDir
    from trainfleet.store.database import Store

    with Store.open(DataDir(data).database) as store:
        steps = {step.step: step for step in store.workflows.steps(run.id)}
        first = steps["first"]
        store.workflows.update_steps(run.id, {"first": {"state": "starting", "jobs": []}})
        assert store.get_job(first.jobs[0]) is not None
    server = _server(data)
    try:
        with Client(server.url, ADMIN_TOKEN) as client:  # type: ignore[attr-defined]
            done = client.wait_run(run.id, 0.2)
    finally:
        server.stop()  # type: ignore[attr-defined]
    jobs = {step.step: step.jobs for step in done.steps}
    assert done.run.state == "succeeded" and jobs["first"] == first.jobs
    assert len(jobs["second"]) == 1


def test_a_one_minute_schedule_runs_once_a_minute_across_a_kill_9(tmp_path: Path) -> None:
    flow = (
        "kind: Workflow\nname: minutely\nschedule: {cron: '* * * * *'}\nsteps:\n"
        "  tick: {job: {roles: {worker: {command: 'true'}}}}\n"
    )
    data = tmp_path / "data"
    server = _server(data)
    try:
        with Client(server.url, ADMIN_TOKEN) as client:  # type: ignore[attr-defined]
            submitted = client.submit_workflow(_folder(tmp_path, flow), send_folder=False)
            assert submitted.run is None and len(submitted.next_times) == 5
            first_time = submitted.next_times[0]
            wait_for(lambda: client.workflow_runs("default", "minutely"), 75, "the first run")
    finally:
        server.stop(signal.SIGKILL)  # type: ignore[attr-defined]
    # Down across the next minute's start; back within catch_up's on-time window.
    time.sleep(max(0.0, first_time + 63 - time.time()))
    server = _server(data)
    try:
        with Client(server.url, ADMIN_TOKEN) as client:  # type: ignore[attr-defined]
            wait_for(lambda: len(client.workflow_runs("default", "minutely")) >= 2, 30, "a 2nd run")
            runs = sorted(client.workflow_runs("default", "minutely"), key=lambda r: r.number)
            for run in runs:
                client.wait_run(run.id, 0.2)
            runs = sorted(client.workflow_runs("default", "minutely"), key=lambda r: r.number)
            why = _why_not_succeeded(client, runs)
    finally:
        server.stop()  # type: ignore[attr-defined]
    assert [(run.number, run.scheduled_for) for run in runs] == [
        (1, first_time),
        (2, first_time + 60),
    ]
    assert [run.trigger for run in runs] == [RunCode.SCHEDULED, RunCode.SCHEDULED]
    assert {run.state for run in runs} == {"succeeded"}, why


def _why_not_succeeded(client: Client, runs: list[RunRecord]) -> list[str]:
    """For a failed assertion: each unsuccessful run's reason and its jobs' events."""
    why = []
    for run in runs:
        if run.state == "succeeded":
            continue
        why.append(f"run {run.number}: {run.state} {run.code} {run.reason}")
        for step in client.workflow_run(run.id).steps:
            for job_id in step.jobs:
                why += [
                    f"  {job_id}: {e.state} {e.task} {e.code} {e.message}"
                    for e in client.events(job_id)
                ]
    return why


def test_each_change_to_a_workflow_is_in_the_audit_trail(
    live: tuple[object, Client], tmp_path: Path
) -> None:
    server, client = live
    flow = (
        "kind: Workflow\nname: audited\nschedule: {cron: '0 0 1 1 *'}\nsteps:\n"
        "  a: {job: {roles: {worker: {command: 'sleep 30'}}}}\n"
    )
    client.submit_workflow(_folder(tmp_path, flow), send_folder=False)
    client.pause_workflow("default", "audited")
    client.resume_workflow("default", "audited")
    run = client.run_workflow("default", "audited")
    client.stop_run(run.id)
    client.retry_run(run.id)
    client.stop_run(run.id)
    client.delete_workflow("default", "audited")
    server.services.audit.writer.flush()  # type: ignore[attr-defined]
    records = list(reversed(list(client.audit(action="workflow"))))
    assert [(r.action, r.target, r.team, r.outcome) for r in records] == [
        ("workflow.submit", "audited", "default", "ok"),
        ("workflow.pause", "audited", "default", "ok"),
        ("workflow.resume", "audited", "default", "ok"),
        ("workflow.run", "audited", "default", "ok"),
        ("workflow.run.stop", run.id, "default", "ok"),
        ("workflow.run.retry", run.id, "default", "ok"),
        ("workflow.run.stop", run.id, "default", "ok"),
        ("workflow.delete", "audited", "default", "ok"),
    ]
    assert records[3].detail == f"run {run.id}" and records[5].detail == "failed steps"
