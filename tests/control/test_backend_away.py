"""A backend that stops answering (the simulated backend's stall: a simulation, no process)
fails no task: what it could not start is started again once it answers, as the same
attempt, and a task that failed meanwhile is restarted as its policy says."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import wait_for

from trainfleet.backends.simulated import SIM_VARIABLE, SimulatedBackend
from trainfleet.control.assembly import engine_at
from trainfleet.domain.conditions import Code
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec


def _spec(**plan: object) -> JobSpec:
    worker = {"command": "true", "replicas": 2, "env": {SIM_VARIABLE: json.dumps(plan)}}
    restart = {"policy": "on-failure", "backoff": {"initial": 0}}
    return JobSpec.model_validate({"name": "away", "roles": {"worker": worker}, "restart": restart})


def test_tasks_not_started_while_the_backend_is_away_start_when_it_is_back(
    tmp_path: Path,
) -> None:
    backend = SimulatedBackend()
    engine = engine_at(tmp_path / "data", backend=backend)
    try:
        backend.stall(3)
        job = engine.submit(_spec(runs=0.5), tmp_path)
        engine.start(job.id)
        wait_for(
            lambda: any(
                task.code == Code.WAITING_FOR_RESOURCES and "trying again" in task.reason
                for task in engine.tasks(job.id)
            ),
            timeout=10,
            what="a task waiting for its backend",
        )
        assert engine.get(job.id).state == State.STARTING
        ended = engine.wait(job.id, timeout=30)
        assert ended.state == State.SUCCEEDED, ended
        assert [task.restarts for task in engine.tasks(job.id)] == [0, 0], "no attempt charged"
        states = {event.state for event in engine.store.list_events(job.id)}
        assert State.FAILED not in states and State.RESTARTING not in states
    finally:
        engine.shutdown()
        engine.store.close()
