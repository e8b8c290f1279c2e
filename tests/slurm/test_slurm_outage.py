"""The Slurm controller away, on the real cluster: a job started while slurmctld is stopped
waits, saying why, and runs once the controller is back, its attempt not counted as a
failure (sbatch could not connect, so it sent nothing: trying again is safe)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import trainfleet, wait_for
from slurm_cluster import SlurmUser

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm.sh"
UNREACHABLE = "Unable to contact slurm controller"


def _controller(user: SlurmUser, command: str) -> None:
    subprocess.run(
        ["bash", str(SCRIPT), command], env=user.env, check=True, capture_output=True, timeout=120
    )


def _task_reason(user: SlurmUser) -> str:
    """The reason of the one job's one task, "" before the job is stored."""
    listed = subprocess.run(
        trainfleet("list", "--output", "json"), env=user.env, capture_output=True, text=True
    )
    jobs = json.loads(listed.stdout or "[]")
    if not jobs:
        return ""
    tasks = user.describe(jobs[0]["id"])["tasks"]
    assert isinstance(tasks, list)
    return str(tasks[0]["reason"])


def test_a_job_started_while_the_controller_is_away_runs_once_it_is_back(
    slurm_user: SlurmUser, tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: away\nroles:\n  worker: {command: 'echo ran on $SLURMD_NODENAME'}\n")
    _controller(slurm_user, "ctld-stop")
    try:
        run = subprocess.Popen(
            trainfleet("run", job),
            env=slurm_user.env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        wait_for(
            lambda: UNREACHABLE in _task_reason(slurm_user),
            timeout=60,
            what="the task waiting for the controller",
        )
        assert run.poll() is None, "the job waits: it has not failed"
    finally:
        _controller(slurm_user, "ctld-start")
    out, _ = run.communicate(timeout=180)
    assert run.returncode == 0, out
    assert "ran on tf-node" in out
    assert f"{UNREACHABLE} (connect failure); trying again in 2s" in out, out
    listed = json.loads(
        subprocess.run(
            trainfleet("list", "--output", "json"),
            env=slurm_user.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    tasks = slurm_user.describe(listed[0]["id"])["tasks"]
    assert isinstance(tasks, list) and tasks[0]["restarts"] == 0, tasks
    launches = list((slurm_user.data_dir / "jobs").glob("*/run/start-*"))
    # one launch file and its script: none are left of the sbatch runs that were refused
    assert len(launches) == 2, launches
