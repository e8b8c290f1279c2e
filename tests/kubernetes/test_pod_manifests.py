"""The Pods, Secrets and root ConfigMap a job becomes on Kubernetes, as data (no cluster),
and what a Pod's status says of its task."""

from __future__ import annotations

import re
from pathlib import Path

from trainfleet.backends.accounts import Account
from trainfleet.backends.kubernetes import manifests
from trainfleet.backends.kubernetes.pod_state import pod_state
from trainfleet.backends.launch import Mount, TaskLaunch
from trainfleet.spec.models import Resources

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
OWNERS = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "trainfleet-j", "uid": "u-1"}]


def _launch(tmp_path: Path, **changes: object) -> TaskLaunch:
    fields: dict[str, object] = {
        "key": ("Worker_Role", 2),
        "argv": ["python", "train.py", "--steps", "5"],
        "env": {"TF_CONFIG": "{}", "API_KEY": "s3cret-value", "PLAIN": "x"},
        "cwd": tmp_path / "job",
        "log_path": tmp_path / "log",
        "record": tmp_path / "run" / "worker-2-0",
        "resources": Resources(cpu="1500m", memory="2Gi", gpu=1),
        "mounts": (Mount(tmp_path / "job", tmp_path / "job"), Mount(tmp_path, Path("/d"), True)),
        "image": "localhost/trainfleet/python:3.11",
        "pull": "never",
        "mask": (b"s3cret-value",),
        "hostname": "mnist-1a-worker-role-2",
    }
    fields.update(changes)
    return TaskLaunch(**fields)  # type: ignore[arg-type]


def _pod(launch: TaskLaunch, secret: str | None = "the-secret") -> dict:
    return manifests.pod_manifest(
        launch,
        job_id="MNIST_1a",
        attempt=3,
        namespace="training",
        node="node-a",
        grace_period=12.6,
        node_lost_seconds=40,
        owners=OWNERS,
        secret=secret,
        mount_kinds=("Directory", "File"),
    )


def test_a_pod_runs_its_task_as_kubernetes_runs_a_container(tmp_path: Path) -> None:
    pod = _pod(_launch(tmp_path))
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "mnist-1a-worker-role-2-3"
    assert meta["namespace"] == "training"
    assert meta["ownerReferences"] == OWNERS, "deleting the job's root deletes the Pod"
    assert meta["finalizers"] == [manifests.FINALIZER], "its exit code is read before it goes"
    assert meta["annotations"][manifests.JOB_ID] == "MNIST_1a"
    assert all(LABEL_VALUE.match(value) for value in meta["labels"].values())
    assert spec["nodeName"] == "node-a" and spec["hostNetwork"] is True
    assert spec["restartPolicy"] == "Never", "trainfleet restarts by the job's policies"
    assert spec["shareProcessNamespace"] is True, "the task is not PID 1: SIGTERM ends it"
    assert spec["terminationGracePeriodSeconds"] == 13
    assert spec["automountServiceAccountToken"] is False
    assert {t["key"] for t in spec["tolerations"]} == set(manifests.LOST_TAINTS)
    assert {t["tolerationSeconds"] for t in spec["tolerations"]} == {40}
    (container,) = spec["containers"]
    assert container["command"] == ["python"]
    assert container["args"] == ["train.py", "--steps", "5"]
    assert container["workingDir"] == str(tmp_path / "job")
    assert container["imagePullPolicy"] == "Never"
    assert container["resources"]["limits"] == {
        "cpu": "1500m",
        "memory": str(2 * 1024**3),
        "nvidia.com/gpu": "1",
    }
    assert container["resources"]["requests"] == container["resources"]["limits"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/d"]["readOnly"] is True
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    assert volumes[mounts["/d"]["name"]] == {"path": str(tmp_path), "type": "File"}


def test_secret_values_stay_out_of_the_pod(tmp_path: Path) -> None:
    launch = _launch(tmp_path)
    assert manifests.secret_variables(launch) == {"API_KEY": "s3cret-value"}
    pod = _pod(launch)
    assert "s3cret-value" not in str(pod), "anyone who may list pods would read it"
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "the-secret", "key": "API_KEY"}}
    assert env["PLAIN"] == {"name": "PLAIN", "value": "x"}
    secret = manifests.secret_manifest("the-secret", "training", {"API_KEY": "v"}, OWNERS)
    assert secret["stringData"] == {"API_KEY": "v"}
    assert secret["metadata"]["ownerReferences"] == OWNERS


def test_the_image_decides_what_the_launch_leaves_out(tmp_path: Path) -> None:
    launch = _launch(
        tmp_path, entrypoint=True, image_workdir=True, argv=["--epochs", "2"], pull="if-missing"
    )
    (container,) = _pod(launch)["spec"]["containers"]
    assert "command" not in container, "the image's ENTRYPOINT runs"
    assert container["args"] == ["--epochs", "2"]
    assert "workingDir" not in container, "the image's WORKDIR"
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_a_team_account_runs_the_container_not_the_images_user(tmp_path: Path) -> None:
    account = Account("tf-team-a", 2001, 2001)
    pod = _pod(_launch(tmp_path, account=account))
    assert pod["spec"]["securityContext"] == {
        "runAsUser": 2001,
        "runAsGroup": 2001,
        "runAsNonRoot": True,
    }
    assert pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_root_is_a_dns_name_whatever_the_job_is_called() -> None:
    root = manifests.root_manifest("My_Job.run-7", "ns")
    assert root["metadata"]["name"] == "trainfleet-my-job-run-7"
    assert root["data"] == {"job": "My_Job.run-7"}


def _status(**container_state: object) -> dict:
    return {
        "metadata": {"name": "p", "finalizers": [manifests.FINALIZER]},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running", "containerStatuses": [{"state": container_state}]},
    }


def test_a_pods_status_says_how_its_task_is() -> None:
    waiting = pod_state(_status(waiting={"reason": "ContainerCreating"}))
    assert not waiting.running and waiting.exit is None and not waiting.fatal
    assert waiting.held and waiting.node == "node-a"
    ended = pod_state(_status(terminated={"exitCode": 137, "reason": "OOMKilled"}))
    assert ended.running and ended.exit == 137 and ended.reason == "OOMKilled"
    never = pod_state(_status(waiting={"reason": "ErrImageNeverPull", "message": "not here"}))
    assert never.fatal and never.waiting_message == "not here"
    evicted = {
        "metadata": {"name": "p"},
        "spec": {},
        "status": {"phase": "Failed", "reason": "Evicted"},
    }
    assert pod_state(evicted).evicted and pod_state(evicted).exit is None
    deleted = _status(running={})
    deleted["metadata"] |= {
        "deletionTimestamp": "2026-11-27T11:00:00Z",
        "annotations": {manifests.STOP: "TERM"},
    }
    state = pod_state(deleted)
    assert state.deleting_since is not None and state.deleting_since.year == 2026
    assert state.stop == "TERM" and state.running
