"""kill -9 of the server under an elastic PyTorch job, and a member lost while no server
runs: started again, the server adopts the store and the survivors, restarts the lost member
alone, and tells each round of the group once."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import wait_for

from trainfleet.client import Client
from trainfleet.domain.records import State

from .harness import ServerProcess

pytest.importorskip("torch")

TOKEN = "elastic-crash-admin-token-0123456789"
ENV = {"TRAINFLEET_ADMIN_TOKEN": TOKEN}
TRAIN = textwrap.dedent(
    """
    import time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.ones(1)
    for step in range(300):
        dist.all_reduce(total)
        time.sleep(0.1)
        if step == 20:
            print("training", flush=True)
    print(f"done rank {rank} of {world}", flush=True)
    """
)


def _submit(client: Client, folder: Path) -> str:
    (folder / "train.py").write_text(TRAIN)
    job = {
        "name": "elastic-crash",
        "framework": "pytorch",
        "pytorch": {"elastic": {"min_replicas": 2, "max_replicas": 3, "max_restarts": 5}},
        "restart": {"policy": "on-failure", "backoff": {"initial": 12}},
        "roles": {
            "worker": {
                "replicas": 3,
                "command": [sys.executable, "-m", "torch.distributed.run", "train.py"],
            }
        },
    }
    return client.submit(json.dumps(job), server_workdir=folder).id


def test_a_restarted_server_adopts_an_elastic_group_and_its_store(reap: Path) -> None:
    server = ServerProcess(reap / "data", ENV)
    with Client(server.url, TOKEN) as client:
        job_id = _submit(client, reap)
        wait_for(
            lambda: b"training" in client.read_log(job_id, "worker", 0),
            timeout=120,
            what="the group to train",
        )
        before = {(t.role, t.index): t.pid for t in client.describe(job_id).tasks}
    server.stop(signal.SIGKILL)
    assert before[("worker", 1)] is not None
    os.killpg(before[("worker", 1)], signal.SIGKILL)  # lost while nothing watches
    time.sleep(1)

    again = ServerProcess(reap / "data", ENV)
    try:
        again.wait_for_line("resumed 1 unfinished job(s)")
        with Client(again.url, TOKEN) as client:
            adopted = {(t.role, t.index): t.pid for t in client.describe(job_id).tasks}
            for key in [("rendezvous", 0), ("worker", 0), ("worker", 2)]:
                assert adopted[key] == before[key], (key, adopted, before)
            assert client.wait(job_id).state == State.SUCCEEDED
            details = client.describe(job_id)
    finally:
        again.stop()
    restarts = {f"{t.role}/{t.index}": t.restarts for t in details.tasks}
    assert restarts == {"worker/0": 0, "worker/1": 1, "worker/2": 0, "rendezvous/0": 0}
    rounds = [e.message for e in details.events if e.code == "regrouped"]
    told = [message.split("(round ")[1].split(":")[0] for message in rounds]
    assert len(told) == len(set(told)), rounds  # each round once, across both servers
    sizes = [int(message.split()[2]) for message in rounds]  # "world size N of 3 (...)"
    assert [n for i, n in enumerate(sizes) if i == 0 or sizes[i - 1] != n] == [3, 2, 3], rounds
