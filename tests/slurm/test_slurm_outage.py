"""The Slurm controller away, on the real cluster: a job a server starts while slurmctld is
stopped waits, saying why, and runs once the controller is back, its attempt not counted
as a failure (sbatch could not connect, so it sent nothing: trying again is safe)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from helpers import wait_for
from server.harness import ServerProcess
from slurm_cluster import SlurmUser

from trainfleet.client import Client
from trainfleet.domain.records import State

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm.sh"
TOKEN = "slurm-test-admin-token-0123456789abcdef"
UNREACHABLE = "Unable to contact slurm controller (connect failure)"

pytestmark = pytest.mark.slow


def controller(user: SlurmUser, command: str) -> None:
    """``scripts/slurm.sh ctld-stop`` or ``ctld-start``: slurmctld alone."""
    subprocess.run(["bash", str(SCRIPT), command], env=user.env, check=True, timeout=120)


def test_a_job_started_while_the_controller_is_away_runs_once_it_is_back(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    job = "name: away\nroles:\n  worker: {command: 'echo ran on $SLURMD_NODENAME'}\n"
    server = ServerProcess(slurm_user.data_dir, {**slurm_user.env, "TRAINFLEET_ADMIN_TOKEN": TOKEN})
    try:
        with Client(server.url, TOKEN) as client:
            controller(slurm_user, "ctld-stop")
            try:
                job_id = client.submit(job, server_workdir=tmp_path).id
                wait_for(
                    lambda: UNREACHABLE in client.describe(job_id).tasks[0].reason,
                    timeout=60,
                    what="the task waiting for the controller",
                )
                waiting = client.describe(job_id)
                assert waiting.job.state == State.STARTING, waiting
                assert "trying again in 2s" in waiting.tasks[0].reason, waiting
            finally:
                controller(slurm_user, "ctld-start")
            wait_for(lambda: client.get(job_id).state.is_final, timeout=180, what="the end")
            details = client.describe(job_id)
            log = client.read_log(job_id, "worker", 0)
    finally:
        server.stop(signal.SIGTERM)
    assert details.job.state == State.SUCCEEDED, details
    assert details.tasks[0].restarts == 0, "a start that waited is no failed attempt"
    assert b"ran on tf-node" in log
    launches = list((slurm_user.data_dir / "jobs" / job_id / "run").glob("start-*"))
    # one launch file and its script: none are left of the sbatch runs that were refused
    assert len(launches) == 2, launches
