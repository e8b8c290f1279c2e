"""A real Slurm cluster for the backend's tests: a controller and three nodes on this machine.

The cluster comes from ``TRAINFLEET_TEST_SLURM_CONF`` (``scripts/slurm.sh start`` prints the
path of its slurm.conf). Without the variable these tests skip, except under CI (``CI``
set), where they fail: CI never skips them.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import trainfleet
from slurm_nodes import slurm_conf, wait_until_idle


@dataclass(frozen=True)
class SlurmUser:
    """The environment of a user whose config file says ``backend: slurm``."""

    env: dict[str, str]
    data_dir: Path

    def squeue(self, *args: str) -> str:
        return subprocess.run(
            ["squeue", "-h", *args], env=self.env, capture_output=True, text=True, check=True
        ).stdout

    def describe(self, job_id: str) -> dict[str, object]:
        done = subprocess.run(
            trainfleet("describe", job_id, "--output", "json"),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        found: dict[str, object] = json.loads(done.stdout)
        return found

    def state(self, job_id: str) -> str:
        job = self.describe(job_id)["job"]
        assert isinstance(job, dict)
        return str(job["state"])

    def submit(self, job_file: Path, timeout: float = 120) -> str:
        """``trainfleet submit JOB_FILE``: the new job's id."""
        done = subprocess.run(
            trainfleet("submit", job_file, "--output", "json"),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return str(json.loads(done.stdout)["id"])


@pytest.fixture
def slurm_user(tmp_path: Path) -> Iterator[SlurmUser]:
    """A config file that names the Slurm backend, and every node up before the test."""
    conf = slurm_conf()
    config = tmp_path / "config" / "trainfleet" / "config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "backend: slurm\nslurm:\n  spread: true\n  poll_interval: 0.2\n"
        "  memory_per_task: 256Mi\n  rendezvous_timeout: 120\n"
    )
    env = {
        **os.environ,
        "SLURM_CONF": conf,
        "XDG_CONFIG_HOME": str(config.parent.parent),
        "TRAINFLEET_DATA_DIR": str(tmp_path / "data"),
    }
    user = SlurmUser(env, tmp_path / "data")
    wait_until_idle(user.env)
    yield user
    for line in user.squeue("-o", "%i %j").splitlines():
        job, name = line.split()
        if name.startswith("trainfleet-") and str(tmp_path) in _workdir(env, job):
            subprocess.run(["scancel", job], env=env, check=False)


def _workdir(env: dict[str, str], job: str) -> str:
    shown = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True, check=False
    )
    return shown.stdout
