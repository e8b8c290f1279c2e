"""The engine as the API's process sees it: its operations run in the engine's process
through the door (both ends in this process here, over a real socket pair; the door's own
tests cross processes), its reads on a read-only store of its own."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import yaml

from trainfleet.control import forwarded_store
from trainfleet.control.door import DoorClient, DoorServer
from trainfleet.control.engine import Engine
from trainfleet.control.engine_client import ENGINE_CALLS, EngineClient
from trainfleet.control.forwarded_store import ForwardedStore
from trainfleet.domain.records import JobNotFound, State
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.spec.models import JobSpec
from trainfleet.store.database import Store

QUICK = JobSpec.model_validate(yaml.safe_load("name: quick\nroles:\n  worker: {command: 'true'}\n"))
HUGE = JobSpec.model_validate(
    {"name": "huge", "roles": {"worker": {"command": "true", "resources": {"cpu": 100000}}}}
)
SLEEPER = JobSpec.model_validate(
    yaml.safe_load("name: sleeper\ngrace_period: 1\nroles:\n  worker: {command: sleep 600}\n")
)


@pytest.fixture
def client(engine: Engine) -> Iterator[EngineClient]:
    ours, theirs = socket.socketpair()
    calls = ENGINE_CALLS | forwarded_store.door_calls()
    server = DoorServer(Connection(theirs.detach()), engine, calls)
    threading.Thread(target=server.serve, daemon=True).start()
    door = DoorClient(Connection(ours.detach()))
    with Store.open(engine.store.target.path or "", read_only=True) as local:
        yield EngineClient(door, ForwardedStore(local, door), engine.data_dir)
    door.close()


def test_a_job_submitted_through_the_client_runs_in_the_engine(
    client: EngineClient, engine: Engine, tmp_path: Path
) -> None:
    job = client.submit_soon(QUICK, tmp_path, user="ana").result(timeout=30)
    assert engine.wait(job.id, timeout=30).state == State.SUCCEEDED
    assert client.get(job.id).state == State.SUCCEEDED
    assert client.log_path(job.id, "worker", 0) == engine.log_path(job.id, "worker", 0)


def test_a_cancel_through_the_client_stops_the_engine_s_job(
    client: EngineClient, engine: Engine, tmp_path: Path, reap: Path
) -> None:
    job = client.submit_soon(SLEEPER, tmp_path).result(timeout=30)
    client.cancel(job.id, "cancelled by ana")
    assert engine.wait(job.id, timeout=30).state == State.CANCELLED


def test_what_the_engine_refuses_is_raised_here_as_itself(
    client: EngineClient, tmp_path: Path
) -> None:
    with pytest.raises(JobNotFound):
        client.get("no-such-job")
    with pytest.raises(JobNotFound):
        client.cancel("no-such-job")
    with pytest.raises(Unschedulable, match="cpu"):
        client.submit_soon(HUGE, tmp_path).result(timeout=30)
