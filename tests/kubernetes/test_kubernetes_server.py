"""`trainfleet server` with the Kubernetes backend, on the real local cluster: the same API
runs a job's tasks as Pods, and a server killed with ``kill -9`` mid-job adopts them from
their records again (none started twice); `trainfleet run` of an example with the same
config file runs it on the cluster too."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from container_images import base_image
from helpers import wait_for
from kube_cluster import kubeconfig
from server.harness import ServerProcess

from trainfleet.client import Client
from trainfleet.domain.records import State

TOKEN = "kubernetes-test-admin-token-0123456789abcdef"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slow


def _config(tmp_path: Path) -> dict[str, str]:
    """The environment of a trainfleet whose config file names the test cluster."""
    folder = tmp_path / "config" / "trainfleet"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        textwrap.dedent(
            f"""
            backend: kubernetes
            kubernetes:
              kubeconfig: {kubeconfig()}
              host_paths: true
              images:
                pytorch: localhost/trainfleet/torch:2.13.0
                default: {base_image()}
            """
        )
    )
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "TRAINFLEET_ADMIN_TOKEN": TOKEN}


def test_server_runs_pods_and_adopts_them_after_kill_9(tmp_path: Path) -> None:
    go = tmp_path / "go"
    wait = f"while [ ! -e {go} ]; do sleep 0.2; done; echo done as $TRAINFLEET_INDEX"
    job = "name: through-the-server\nroles:\n  worker:\n    replicas: 3\n"
    job += f'    command: ["sh", "-c", "{wait}"]\n'
    env = _config(tmp_path)
    data_dir = tmp_path / "data"
    server = ServerProcess(data_dir, env)
    try:
        with Client(server.url, TOKEN) as client:
            job_id = client.submit(job, server_workdir=tmp_path).id
            wait_for(lambda: client.get(job_id).state == State.RUNNING, timeout=120, what="running")
            wait_for(
                lambda: all(task.address for task in client.describe(job_id).tasks),
                timeout=60,
                what="every Pod running",
            )
        assert server.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        server.stop(signal.SIGKILL)

    again = ServerProcess(data_dir, env)
    try:
        again.wait_for_line("resumed 1 unfinished job(s)")
        go.touch()
        with Client(again.url, TOKEN) as client:
            wait_for(lambda: client.get(job_id).state.is_final, timeout=120, what="the end")
            details = client.describe(job_id)
            assert details.job.state == State.SUCCEEDED, details
            assert [task.restarts for task in details.tasks] == [0, 0, 0], "adopted, not rerun"
            for index in range(3):
                log = client.read_log(job_id, "worker", index)
                assert log == f"done as {index}\n".encode(), log
    finally:
        again.stop()


def test_an_example_runs_unchanged_on_the_cluster(tmp_path: Path) -> None:
    """examples/torch_ddp/job.yaml names no image: the config file's pytorch image."""
    folder = shutil.copytree(EXAMPLES / "torch_ddp", tmp_path / "torch_ddp")
    env = {**os.environ, **_config(tmp_path), "TRAINFLEET_DATA_DIR": str(tmp_path / "data")}
    ran = subprocess.run(
        [sys.executable, "-m", "trainfleet", "run", "job.yaml"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "done: 3 ranks" in ran.stdout, ran.stdout[-3000:]
