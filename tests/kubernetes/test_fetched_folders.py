"""What a job needs of this machine's folders, checked before any Pod is made where the
nodes see none of them (no ``kubernetes.host_paths``). No cluster: nothing here asks the
API anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainfleet.backends.kubernetes.backend import KubernetesBackend
from trainfleet.backends.launch import JobLaunch
from trainfleet.datadir.layout import DataDir
from trainfleet.scheduling.placement import Placement, Unschedulable
from trainfleet.spec.backends import KubernetesConfig
from trainfleet.spec.models import JobSpec
from trainfleet.workdirs.store import TREE_MARKER

IMAGE = "localhost/trainfleet/python:3.11"
URL = "http://10.0.0.5:8080"


def _spec(**more: object) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "j", "roles": {"worker": {"command": "true", "image": IMAGE}}, **more}
    )


def _job(tmp_path: Path, spec: JobSpec, sent: bool, files: bool) -> JobLaunch:
    data_dir = DataDir(tmp_path / "data")
    job_id = "j-0123abcd"
    workdir = data_dir.job_dir(job_id) / "workdir"
    workdir.mkdir(parents=True)
    if sent:
        (workdir.parent / TREE_MARKER).write_text("admin/" + "0" * 64)
    if files:
        (workdir / "train.py").write_text("print()\n")
    return JobLaunch(job_id, spec, Placement(()), workdir, data_dir, {("worker", 0): 0})


def test_without_host_paths_a_job_needs_a_server_and_its_address() -> None:
    spec = _spec()
    with pytest.raises(Unschedulable, match=r"kubernetes.host_paths: .*`trainfleet run` has none"):
        KubernetesBackend(KubernetesConfig(server_url=URL)).check(spec)
    with pytest.raises(Unschedulable, match=r"^kubernetes.server_url: .*http://host:port"):
        KubernetesBackend(KubernetesConfig(), supervised=True).check(spec)
    KubernetesBackend(KubernetesConfig(server_url=URL), supervised=True).check(spec)
    KubernetesBackend(KubernetesConfig(host_paths=True)).check(spec)  # trainfleet run


def test_a_folder_sent_or_empty_reaches_pods_one_in_place_does_not(tmp_path: Path) -> None:
    backend = KubernetesBackend(KubernetesConfig(server_url=URL), supervised=True)
    backend._check_files(_job(tmp_path / "sent", _spec(), sent=True, files=True))
    backend._check_files(_job(tmp_path / "empty", _spec(), sent=False, files=False))
    in_place = _job(tmp_path / "in-place", _spec(), sent=False, files=True)
    with pytest.raises(Unschedulable, match=r"^kubernetes.host_paths: the job runs in place"):
        backend._check_files(in_place)
    claims = {str(tmp_path / "in-place" / "data"): "trainfleet-data"}
    claimed = KubernetesBackend(KubernetesConfig(server_url=URL, claims=claims), supervised=True)
    claimed._check_files(in_place)  # a claim of the data directory holds it


def test_heartbeats_need_the_data_directory_in_the_pods(tmp_path: Path) -> None:
    spec = _spec(progress={"timeout": 60})
    backend = KubernetesBackend(KubernetesConfig(server_url=URL), supervised=True)
    job = _job(tmp_path, spec, sent=True, files=True)
    with pytest.raises(Unschedulable, match=r"^progress: .*kubernetes.claims"):
        backend._check_files(job)
    claims = {str(tmp_path / "data"): "trainfleet-data"}
    KubernetesBackend(
        KubernetesConfig(server_url=URL, claims=claims), supervised=True
    )._check_files(job)


def test_a_path_of_the_nodes_is_mounted_only_through_a_claim() -> None:
    """A hostPath follows the node's links as root: a task that may write under it could
    lead the next job's mount anywhere on the node. Through a claim, Kubernetes resolves a
    folder of it (subPath) within the volume."""
    role = {
        "command": "true",
        "image": IMAGE,
        "mounts": [{"source": "/mnt/shared/run", "target": "/r"}],
    }
    spec = JobSpec.model_validate({"name": "j", "roles": {"worker": role}})
    bare = KubernetesBackend(KubernetesConfig(server_url=URL), supervised=True)
    with pytest.raises(Unschedulable, match=r"^roles.worker.mounts\[0\].source: /mnt/shared/run "):
        bare.check(spec)
    claims = {"/mnt/shared": "shared-data"}
    KubernetesBackend(KubernetesConfig(server_url=URL, claims=claims), supervised=True).check(spec)
    inside = {"command": "true", "image": IMAGE, "mounts": [{"source": "data", "target": "/d"}]}
    bare.check(JobSpec.model_validate({"name": "j", "roles": {"worker": inside}}))
