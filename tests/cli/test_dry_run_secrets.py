"""`trainfleet run --dry-run` of a job that names secrets shows each reference, never a value.

A dry run reads no secret: each variable that names one shows ``{secret: NAME, key: KEY}``
(``file: true`` where the task would get a file), without a server and with one that
holds the secret's value.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import trainfleet
from server.harness import ServerProcess

from trainfleet.client import Client

TOKEN = "dry-run-secrets-admin-token"
VALUE = "never-in-a-dry-run-5e1d"
JOB = """\
name: secretive
roles:
  worker:
    command: python -c pass
    env:
      WANDB_API_KEY: {secret: wandb, key: api-key}
      WANDB_FILE: {secret: wandb, key: api-key, file: true}
"""
SHOWN = [
    "  WANDB_API_KEY={secret: wandb, key: api-key}",
    "  WANDB_FILE={secret: wandb, key: api-key, file: true}",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose team ``default`` holds the secret ``wandb``."""
    process = ServerProcess(
        tmp_path_factory.mktemp("dry-run") / "data", {"TRAINFLEET_ADMIN_TOKEN": TOKEN}
    )
    with Client(process.url, TOKEN) as client:
        client.create_secret("wandb", {"api-key": VALUE}, "default")
    yield process
    process.stop()


def dry_run(job: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        trainfleet("run", "--dry-run", job),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_an_embedded_dry_run_shows_the_references(
    job_file: Callable[[str], Path], data_dir: Path
) -> None:
    done = dry_run(job_file(JOB))
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert [line for line in done.stdout.splitlines() if line.startswith("  WANDB_")] == SHOWN


def test_a_dry_run_with_a_server_shows_the_references_not_the_value(
    server: ServerProcess, job_file: Callable[[str], Path], data_dir: Path
) -> None:
    """With a server configured that holds the value, still only the references."""
    done = dry_run(job_file(JOB), TRAINFLEET_SERVER=server.url, TRAINFLEET_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("  WANDB_")] == SHOWN
    assert VALUE not in done.stdout + done.stderr


def test_a_kubeflow_secret_key_ref_is_shown_the_same(
    job_file: Callable[[str], Path], data_dir: Path
) -> None:
    """A TFJob's ``secretKeyRef`` is the same reference, shown the same."""
    manifest = job_file(
        """\
        apiVersion: kubeflow.org/v1
        kind: TFJob
        metadata: {name: secretive}
        spec:
          tfReplicaSpecs:
            Worker:
              replicas: 1
              template:
                spec:
                  containers:
                    - name: tensorflow
                      command: [python, -c, pass]
                      env:
                        - name: WANDB_API_KEY
                          valueFrom: {secretKeyRef: {name: wandb, key: api-key}}
        """
    )
    done = dry_run(manifest)
    assert done.returncode == 0, done.stderr
    assert SHOWN[0] in done.stdout.splitlines()
