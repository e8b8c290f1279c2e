"""The folders of the server's machine a submitted job may run in and mount
(``trainfleet server --allow-path``): everything else is refused at submission, naming the
field, and nothing is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainfleet.client import BadRequest, Client
from trainfleet.server.host_paths import HostPaths

from .harness import LiveServer

IMAGE = "localhost/trainfleet/never-there:1"  # pull: never, so the job fails at once


def _job(*mounts: str) -> str:
    """A job whose worker's containers mount each of ``mounts`` at /m<n>."""
    role = {
        "command": "true",
        "image": IMAGE,
        "pull": "never",
        "mounts": [{"source": source, "target": f"/m{n}"} for n, source in enumerate(mounts)],
    }
    return json.dumps({"name": "mounts", "roles": {"worker": role}})


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "datasets"
    (folder / "imagenet").mkdir(parents=True)
    return folder


@pytest.fixture
def client(tmp_path: Path, shared: Path) -> Iterator[Client]:
    server = LiveServer(tmp_path / "data", host_paths=HostPaths([shared])).start()
    try:
        with Client(server.url, server.token, timeout=30) as client:
            yield client
    finally:
        server.stop()


def _refused(client: Client, job: str, field: str, **where: Path) -> None:
    before = len(list(client.list_jobs()))
    with pytest.raises(BadRequest, match="outside the folders this server lets jobs use") as got:
        client.submit(job, **where)  # type: ignore[arg-type]
    assert [problem.field for problem in got.value.problems] == [field], got.value.problems
    assert len(list(client.list_jobs())) == before  # nothing stored


def test_only_allowed_folders_and_the_jobs_own_are_mounted(
    client: Client, shared: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "job"
    (folder / "data").mkdir(parents=True)
    (shared / "escape").symlink_to("/etc")
    field = "roles.worker.mounts[0].source"
    _refused(client, _job("/etc"), field, workdir=folder)
    _refused(client, _job("../../.."), field, workdir=folder)  # out of the uploaded copy
    _refused(client, _job(str(shared / "escape")), field, workdir=folder)  # a link out
    _refused(client, _job(str(shared / "imagenet" / ".." / "..")), field, workdir=folder)
    two = _job(str(shared / "imagenet"), "/root")
    _refused(client, two, "roles.worker.mounts[1].source", workdir=folder)

    for mounts in ([str(shared / "imagenet")], ["data"], [str(shared), "."]):
        client.submit(_job(*mounts), workdir=folder)


def test_a_job_runs_in_place_only_in_an_allowed_folder(
    client: Client, shared: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _refused(client, _job(), "workdir", server_workdir=elsewhere)
    # In place in an allowed folder, its mounts are judged against the allowed folders.
    client.submit(_job("imagenet"), server_workdir=shared)
    _refused(client, _job(str(elsewhere)), "roles.worker.mounts[0].source", server_workdir=shared)


def test_kubeflow_host_paths_are_judged_the_same(client: Client, tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "hostpath"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": IMAGE,
                                    "imagePullPolicy": "Never",
                                    "command": ["true"],
                                    "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                                }
                            ],
                            "volumes": [{"name": "host", "hostPath": {"path": "/var/lib"}}],
                        }
                    },
                }
            }
        },
    }
    _refused(client, json.dumps(manifest), "roles.master.mounts[0].source", workdir=tmp_path)


def test_without_a_list_any_folder_may_be_mounted(tmp_path: Path) -> None:
    server = LiveServer(tmp_path / "data").start()
    try:
        with Client(server.url, server.token, timeout=30) as client:
            job = client.submit(_job("/etc"), workdir=tmp_path)
            ended = client.wait(job.id)
            assert ended.state == "failed", ended  # the image is not there, as meant
            assert "image 'localhost/trainfleet/never-there:1' not found" in (ended.reason or "")
    finally:
        server.stop()


def test_a_folder_that_is_not_there_is_refused_at_start(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "trainfleet", "--data-dir", str(tmp_path / "data"), "server"]
    result = subprocess.run(
        [*argv, "--allow-path", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TRAINFLEET_ADMIN_TOKEN": "host-paths-token-0123456789abcdef"},
    )
    assert result.returncode == 2, result
    assert "--allow-path" in result.stderr and "does not exist" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
