"""`trainfleet server` with the Slurm backend: the same API runs jobs on the cluster, and a
server killed with ``kill -9`` mid-job adopts the job's tasks from their records again."""

from __future__ import annotations

import re
import signal
import textwrap
from pathlib import Path

import pytest
from helpers import wait_for
from server.harness import ServerProcess
from slurm_cluster import SlurmUser
from slurm_nodes import NODES

from trainfleet.client import BadRequest, Client
from trainfleet.domain.records import State
from trainfleet.wire import UserBody

TOKEN = "slurm-test-admin-token-0123456789abcdef"

pytestmark = pytest.mark.slow


def test_server_runs_on_slurm_and_adopts_after_kill_9(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.2; done; echo done on $SLURMD_NODENAME"
    job = textwrap.dedent(
        f"""
        name: through-the-server
        roles:
          worker: {{replicas: 3, command: ["bash", "-c", "{wait}"]}}
        """
    )
    env = {**slurm_user.env, "TRAINFLEET_ADMIN_TOKEN": TOKEN}
    server = ServerProcess(slurm_user.data_dir, env)
    try:
        with Client(server.url, TOKEN) as client:
            job_id = client.submit(job, server_workdir=tmp_path).id
            wait_for(lambda: client.get(job_id).state == State.RUNNING, timeout=120, what="running")
            before = client.describe(job_id).tasks
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        server.stop(signal.SIGKILL)
    hosts = {task.address.rpartition(":")[0] for task in before}
    assert len(hosts) >= 2 and hosts <= set(NODES), before

    again = ServerProcess(slurm_user.data_dir, env)
    try:
        again.wait_for_line("resumed 1 unfinished job(s)")
        go.touch()
        with Client(again.url, TOKEN) as client:
            wait_for(lambda: client.get(job_id).state.is_final, timeout=120, what="the end")
            details = client.describe(job_id)
            assert details.job.state == State.SUCCEEDED, details
            assert [task.restarts for task in details.tasks] == [0, 0, 0], "adopted, not rerun"
            logs = client.read_log(job_id, "worker", 0)
            assert b"done on tf-node" in logs, logs
    finally:
        again.stop()


def test_server_secrets_never_reach_a_slurm_task(slurm_user: SlurmUser, tmp_path: Path) -> None:
    """sbatch passes its environment on to the job: it gets only the Slurm client's."""
    secret = "slurm-secret-value-4b7e"
    job = (
        "name: env-on-slurm\nroles:\n  worker: {command: "
        "\"python -c 'import json, os; print(json.dumps(dict(os.environ)))'\"}\n"
    )
    env = {**slurm_user.env, "TRAINFLEET_ADMIN_TOKEN": TOKEN, "AWS_SECRET_ACCESS_KEY": secret}
    server = ServerProcess(slurm_user.data_dir, env)
    try:
        with Client(server.url, TOKEN) as client:
            job_id = client.submit(job, server_workdir=tmp_path).id
            wait_for(lambda: client.get(job_id).state.is_final, timeout=180, what="the end")
            assert client.get(job_id).state == State.SUCCEEDED, client.describe(job_id)
            log = client.read_log(job_id, "worker", 0)
    finally:
        server.stop()
    assert b"SLURM_JOB_ID" in log and b"TRAINFLEET_JOB" in log, log
    for leaked in (secret.encode(), TOKEN.encode(), b"AWS_SECRET_ACCESS_KEY"):
        assert leaked not in log, leaked


def test_a_teams_job_carries_its_account_and_secrets_stay_off_slurm(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    """A job of team vision is submitted with --account=vision (the cluster accepts and
    runs it); a job naming a secret is refused: its values would sit in the launch file."""
    env = {**slurm_user.env, "TRAINFLEET_ADMIN_TOKEN": TOKEN}
    server = ServerProcess(slurm_user.data_dir, env)
    try:
        with Client(server.url, TOKEN) as admin:
            admin.create_team("vision")
            token = admin.create_user(UserBody(name="ana", team="vision")).token
        with Client(server.url, token) as ana:
            job = "name: charged\nroles:\n  worker: {command: 'echo on $SLURM_JOB_ACCOUNT'}\n"
            job_id = ana.submit(job, server_workdir=tmp_path).id
            assert ana.get(job_id).team == "vision"
            wait_for(lambda: ana.get(job_id).state.is_final, timeout=180, what="the end")
            assert ana.get(job_id).state == State.SUCCEEDED, ana.describe(job_id)
            assert ana.read_log(job_id, "worker", 0) == b"on vision\n"
            ana.create_secret("db", {"password": "never-on-slurm"})
            secret = job + "env: {PASSWORD: {secret: db, key: password}}\n"
            with pytest.raises(BadRequest, match=r"env\.PASSWORD: secrets reach tasks on the"):
                ana.submit(secret, server_workdir=tmp_path)
        (script,) = (slurm_user.data_dir / "jobs" / job_id / "run").glob("*.sh")
        assert re.search(r"(?m)^#SBATCH --ntasks=.* --account=vision$", script.read_text())
    finally:
        server.stop()
