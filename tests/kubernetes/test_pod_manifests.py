"""The Pods, Secrets and root ConfigMap a job becomes on Kubernetes, as data (no cluster),
and what a Pod's status says of its task."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from trainfleet.backends.accounts import Account
from trainfleet.backends.kubernetes import manifests, volumes
from trainfleet.backends.kubernetes.pod_state import pod_state
from trainfleet.backends.launch import Mount, TaskLaunch
from trainfleet.spec.models import Resources

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
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


def _pod(
    launch: TaskLaunch, secret: str | None = "the-secret", files: volumes.PodFiles | None = None
) -> dict:
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
        files=files or volumes.on_hosts(launch, ("Directory", "File"), {}),
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
        "fsGroup": 2001,
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


def _fetched(tmp_path: Path, empty: bool = False) -> volumes.Fetched:
    return volumes.Fetched(
        url="http://10.0.0.5:8080/api/v1/jobs/MNIST_1a/workdir",
        token_secret="trainfleet-mnist-1a-workdir",
        image=None,
        workdir=tmp_path / "job",
        share=tmp_path / "tasks",
        root="trainfleet-mnist-1a",
        programs={tmp_path / "programs" / "tf_server.py": "tf_server.py"},
        secret_dir=tmp_path / "secrets",
        secret_files={"db/password": "trainfleet.file.0"},
        empty=empty,
    )


def test_without_host_paths_no_path_of_this_machine_reaches_a_node(tmp_path: Path) -> None:
    """Each mount's source becomes what a node can have: the job's folder (and a role's
    mount of a folder in it) the emptyDir an init container fills from the server, the
    programs the root ConfigMap, the secret files the task's Secret, trainfleet's share an
    emptyDir; no path of the node's (the backend refuses a job that mounts one)."""
    job = tmp_path / "job"
    mounts = (
        Mount(job, Path("/workspace")),
        Mount(job / "data", Path("/data"), True),
        Mount(tmp_path / "programs" / "tf_server.py", tmp_path / "programs" / "tf_server.py"),
        Mount(tmp_path / "secrets", tmp_path / "secrets", True),
        Mount(tmp_path / "tasks", tmp_path / "tasks"),
    )
    launch = _launch(tmp_path, mounts=mounts, account=Account("team-a", 2001, 2002))
    files = volumes.fetched(launch, _fetched(tmp_path), "the-secret")
    pod = _pod(launch, files=files)
    spec = pod["spec"]
    assert str(tmp_path) not in str(spec["volumes"]), "no hostPath of this machine"
    by_name = {v["name"]: v for v in spec["volumes"]}
    seen = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
    assert by_name[seen["/workspace"]["name"]]["emptyDir"] == {}
    assert seen["/data"] | {"name": "workdir"} == {
        "name": "workdir",
        "mountPath": "/data",
        "readOnly": True,
        "subPath": "data",
    }
    program = seen[str(tmp_path / "programs" / "tf_server.py")]
    assert program["subPath"] == "tf_server.py"
    assert by_name[program["name"]]["configMap"] == {"name": "trainfleet-mnist-1a"}
    secrets = by_name[seen[str(tmp_path / "secrets")]["name"]]["secret"]
    assert secrets["secretName"] == "the-secret"
    assert secrets["items"] == [{"key": "trainfleet.file.0", "path": "db/password"}]
    assert secrets["defaultMode"] == 0o440 and spec["securityContext"]["fsGroup"] == 2002
    assert by_name[seen[str(tmp_path / "tasks")]["name"]]["emptyDir"] == {}
    # The job's output folder is there, empty, for its tasks to write: none is collected.
    output = seen[str(tmp_path / "tasks" / "output")]
    assert by_name[output["name"]]["emptyDir"] == {} and not output["readOnly"]
    assert output["name"] != seen[str(tmp_path / "tasks")]["name"]
    assert not any("hostPath" in volume for volume in spec["volumes"])
    node_path = _launch(tmp_path, mounts=(*mounts, Mount(Path("/mnt/data"), Path("/data"))))
    with pytest.raises(ValueError, match="/mnt/data"):
        volumes.fetched(node_path, _fetched(tmp_path), "the-secret")

    (init,) = spec["initContainers"]
    assert init["image"] == launch.image and init["imagePullPolicy"] == "Never"
    assert init["command"][:2] == ["python3", "-c"] and init["command"][3] == "/workspace"
    assert init["volumeMounts"] == [{"name": "workdir", "mountPath": "/workspace"}]
    env = {e["name"]: e for e in init["env"]}
    assert env["TRAINFLEET_WORKDIR_URL"]["value"].endswith("/jobs/MNIST_1a/workdir")
    token = {"name": "trainfleet-mnist-1a-workdir", "key": volumes.TOKEN_KEY}
    assert env["TRAINFLEET_WORKDIR_TOKEN"]["valueFrom"] == {"secretKeyRef": token}
    assert "value" not in env["TRAINFLEET_WORKDIR_TOKEN"], "the token stays in its Secret"


def test_a_job_folder_that_starts_empty_is_fetched_from_nowhere(tmp_path: Path) -> None:
    launch = _launch(tmp_path, mounts=(Mount(tmp_path / "job", tmp_path / "job"),))
    files = volumes.fetched(launch, _fetched(tmp_path, empty=True), None)
    assert files.init_containers == []
    assert files.volumes == [{"name": "workdir", "emptyDir": {}}]


def _initialising(**init_state: object) -> dict:
    pod = _status(waiting={"reason": "PodInitializing"})
    pod["status"]["initContainerStatuses"] = [{"name": "fetch-workdir", "state": init_state}]
    return pod


def test_an_init_container_stands_for_the_task_until_it_has_ended_well() -> None:
    fetching = pod_state(_initialising(running={}))
    assert not fetching.running and fetching.exit is None
    assert fetching.waiting == "PodInitializing (fetch-workdir)"
    failed = pod_state(
        _initialising(terminated={"exitCode": 1, "reason": "Error", "message": "401 no"})
    )
    assert failed.running and failed.exit == 1 and failed.init == "fetch-workdir"
    assert failed.message == "401 no"
    no_image = pod_state(_initialising(waiting={"reason": "ErrImageNeverPull"}))
    assert no_image.fatal
    done = _initialising(terminated={"exitCode": 0})
    done["status"]["containerStatuses"] = [{"state": {"running": {}}}]
    assert pod_state(done).running and pod_state(done).init == ""


def test_a_path_a_claim_stands_for_is_that_claim_on_hosts_or_not(tmp_path: Path) -> None:
    shared = "shared-data-" + "x" * 51  # a claim's name may be 63 long, as a volume's
    claims = {Path("/mnt/shared"): shared}
    mounts = (
        Mount(tmp_path / "job", tmp_path / "job"),
        Mount(Path("/mnt/shared/ckpt/run-1"), Path("/ckpt")),
        Mount(Path("/mnt/shared"), Path("/shared"), True),
    )
    launch = _launch(tmp_path, mounts=mounts)
    on_hosts = volumes.on_hosts(launch, ("Directory",) * 3, claims)
    fetched = volumes.fetched(launch, replace(_fetched(tmp_path), claims=claims), secret=None)
    for files in (on_hosts, fetched):
        by_name = {v["name"]: v for v in files.volumes}
        seen = {m["mountPath"]: m for m in files.mounts}
        claim = {"persistentVolumeClaim": {"claimName": shared}, "name": "claim-0"}
        assert all(DNS_LABEL.match(volume["name"]) for volume in files.volumes)
        assert by_name[seen["/ckpt"]["name"]] == claim
        assert seen["/ckpt"]["subPath"] == "ckpt/run-1"
        assert seen["/shared"]["name"] == "claim-0" and "subPath" not in seen["/shared"]
        assert len(files.volumes) == 2, "one volume per claim, however many mounts"
    out = Mount(Path("/mnt/shared/../elsewhere"), Path("/x"))
    (volume,) = volumes.on_hosts(_launch(tmp_path, mounts=(out,)), ("Directory",), claims).volumes
    assert volume["hostPath"]["path"] == "/mnt/shared/../elsewhere", "no way out through '..'"


def test_a_claimed_data_directory_holds_the_job_folder_and_share_nothing_fetched(
    tmp_path: Path,
) -> None:
    """Where the data directory is a claim (a volume the server mounts too), the job's
    folder and what trainfleet shares with its tasks (checkpoints) come from it."""
    mounts = (
        Mount(tmp_path / "job", Path("/workspace")),
        Mount(tmp_path / "tasks", tmp_path / "tasks"),
        Mount(tmp_path / "programs" / "tf_server.py", tmp_path / "programs" / "tf_server.py"),
    )
    launch = _launch(tmp_path, mounts=mounts)
    how = replace(_fetched(tmp_path), claims={tmp_path: "trainfleet-data"})
    files = volumes.fetched(launch, how, secret=None)
    assert files.init_containers == []
    seen = {m["mountPath"]: m for m in files.mounts}
    assert seen["/workspace"]["name"] == seen[str(tmp_path / "tasks")]["name"] == "claim-0"
    assert seen["/workspace"]["subPath"] == "job"
    assert seen[str(tmp_path / "tasks")]["subPath"] == "tasks"
    assert str(tmp_path / "tasks" / "output") not in seen, "the claim's: outputs are kept"
    assert seen[str(tmp_path / "programs" / "tf_server.py")]["name"] == "programs"
