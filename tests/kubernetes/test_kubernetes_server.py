"""`trainfleet server` with the Kubernetes backend, on the real local cluster: the same API
runs a job's tasks as Pods, and a server killed with ``kill -9`` mid-job adopts them from
their records again (none started twice); without host paths each Pod fetches the job's
folder from the server; `trainfleet run` of an example with the same config file runs it
on the cluster too."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from container_images import base_image
from helpers import wait_for
from kube_cluster import kubeconfig, kubectl
from server.harness import ServerProcess

from trainfleet.client import Client
from trainfleet.domain.records import State
from trainfleet.wire import UserBody

TOKEN = "kubernetes-test-admin-token-0123456789abcdef"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, **files: object) -> dict[str, str]:
    """The environment of a trainfleet whose config file names the test cluster; ``files``:
    how its Pods get the job's folder (default: as host paths)."""
    folder = tmp_path / "config" / "trainfleet"
    folder.mkdir(parents=True)
    kubernetes = {
        "kubeconfig": kubeconfig(),
        **(files or {"host_paths": True}),
        "images": {"pytorch": "localhost/trainfleet/torch:2.13.0", "default": base_image()},
    }
    config = {"backend": "kubernetes", "kubernetes": kubernetes}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
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
            # A Pod that failed to start on a loaded machine was already rerun: adoption
            # must add no run to what the first server started.
            before = [task.restarts for task in client.describe(job_id).tasks]
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
            restarts = [task.restarts for task in details.tasks]
            assert restarts == before, ("adopted, not rerun", client.events(job_id))
            for index in range(3):
                log = client.read_log(job_id, "worker", index)
                assert log == f"done as {index}\n".encode(), log
    finally:
        again.stop()


FETCHED_JOB = """\
name: fetched
queue: vision
roles:
  worker:
    replicas: 2
    command: [python3, task.py]
    image: localhost/trainfleet/python:3.11
    env:
      CERT_FILE: {secret: db, key: cert, file: true}
    mounts: [{source: /mnt/results/fetched, target: /results}]
restart: {policy: never}
"""
TASK = """\
import os, pathlib
print(pathlib.Path("data.txt").read_text().strip(), "as", os.environ["TRAINFLEET_INDEX"])
print("cert reversed:", pathlib.Path(os.environ["CERT_FILE"]).read_text()[::-1])
pathlib.Path("written-in-the-pod").write_text("stays in the Pod")
pathlib.Path("/results", os.environ["TRAINFLEET_INDEX"]).write_text("kept in the claim")
"""
VOLUME = """\
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 1Mi}}
  accessModes: [ReadWriteMany]
  storageClassName: ""
  hostPath: {{path: {path}, type: DirectoryOrCreate}}
  claimRef: {{namespace: default, name: {name}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default}}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: {name}
  resources: {{requests: {{storage: 1Mi}}}}
"""


def test_pods_fetch_the_job_folder_from_the_server_without_host_paths(tmp_path: Path) -> None:
    """No node sees this machine's folders: each Pod's init container fetches the folder
    sent with the job from the server, with the job's token; its secret file comes from
    its Secret; what it writes there stays in the Pod, and what it writes to a mount of a
    path that a PersistentVolumeClaim stands for (``kubernetes.claims``) is in the claim."""
    with socket.socket() as probe:  # the port the Pods are told, before the server starts
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    claim, volume = f"results-{port}", tmp_path / "volume"
    (tmp_path / "claim.yaml").write_text(VOLUME.format(name=claim, path=volume))
    made = kubectl("apply", "-f", str(tmp_path / "claim.yaml"))
    assert made.returncode == 0, made.stderr
    env = _config(tmp_path, server_url=f"http://127.0.0.1:{port}", claims={"/mnt/results": claim})
    server = ServerProcess(tmp_path / "data", env, ["--port", str(port)])
    sent = tmp_path / "sent"
    sent.mkdir()
    (sent / "task.py").write_text(TASK)
    (sent / "data.txt").write_text("data sent with the job\n")
    try:
        with Client(server.url, TOKEN, timeout=60) as admin:
            admin.create_team("vision")
            admin.create_user(UserBody(name="ana", team="vision"))
            admin.create_secret("db", {"cert": "CERT-VALUE"}, team="vision")
            job_id = admin.submit(FETCHED_JOB, workdir=sent).id
            wait_for(lambda: admin.get(job_id).state.is_final, timeout=180, what="the end")
            details = admin.describe(job_id)
            assert details.job.state == State.SUCCEEDED, details
            for index in range(2):
                log = admin.read_log(job_id, "worker", index).decode()
                assert log == f"data sent with the job as {index}\ncert reversed: EULAV-TREC\n"
            workdir = Path(details.job.workdir)
            assert (workdir / "task.py").is_file() and not (workdir / "written-in-the-pod").exists()
            kept = {path.name: path.read_text() for path in (volume / "fetched").iterdir()}
            assert kept == {"0": "kept in the claim", "1": "kept in the claim"}
    finally:
        server.stop()
        kubectl("delete", "--wait=false", "-f", str(tmp_path / "claim.yaml"))


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
