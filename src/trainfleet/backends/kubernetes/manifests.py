"""The objects a job becomes on Kubernetes, as plain data (no client, no I/O): its root
ConfigMap, which owns everything else of the job (deleting it deletes them all), and
for each task's attempt a Pod and, where its environment holds secret values, a Secret.

Its volumes, and where their files come from, are built by ``volumes``. A Pod runs its container
as Kubernetes runs any: the image's ENTRYPOINT, WORKDIR and ENV unless the launch says
otherwise (as ``supervision.containers`` does with podman), on its node's network at the
ports trainfleet chose (``network: host``), on the node trainfleet chose (``nodeName``:
the job's addresses are known before it starts), with a finalizer of trainfleet's, so that
its exit status is read before the object is gone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trainfleet.backends.kubernetes.volumes import PodFiles
from trainfleet.backends.launch import TaskLaunch, task_hostname
from trainfleet.backends.supervision.containers import GPU_VARIABLES
from trainfleet.scheduling.placement import TaskKey

Manifest = dict[str, Any]

MANAGED = {"app.kubernetes.io/managed-by": "trainfleet"}
SELECTOR = "app.kubernetes.io/managed-by=trainfleet"
JOB_LABEL = "trainfleet.io/job"
JOB_ID = "trainfleet.io/job-id"
ROLE = "trainfleet.io/role"
INDEX = "trainfleet.io/index"
ATTEMPT = "trainfleet.io/attempt"
STOP = "trainfleet.io/stop"
"""Annotation trainfleet puts on a Pod before it deletes it (``TERM`` or ``KILL``): a Pod
being deleted without it was deleted by someone else."""
FINALIZER = "trainfleet.io/exit-read"
"""Holds a Pod's object until trainfleet has read how its container ended."""
PULL_POLICY = {"if-missing": "IfNotPresent", "always": "Always", "never": "Never"}
GPU_RESOURCE = "nvidia.com/gpu"
LOST_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def label(text: str) -> str:
    """``text`` as a label value: at most 63 letters, digits, ``-``, ``_`` or ``.``,
    beginning and ending with a letter or digit."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")


def root_name(job_id: str) -> str:
    """The job's root ConfigMap: ``trainfleet-<job>`` (lower case, as a DNS name)."""
    return "trainfleet-" + re.sub(r"[^a-z0-9]+", "-", job_id.lower()).strip("-")[:200]


def pod_name(job_id: str, key: TaskKey, attempt: int) -> str:
    """A task's attempt's Pod (and its Secret): ``<job>-<role>-<index>-<attempt>``."""
    return f"{task_hostname(job_id, key)}-{attempt}"


def root_manifest(job_id: str, namespace: str, files: Mapping[str, str] | None = None) -> Manifest:
    """The job's root ConfigMap; ``files``: more of its data (trainfleet's programs, for
    Pods that do not see this machine's)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": root_name(job_id),
            "namespace": namespace,
            "labels": {**MANAGED, JOB_LABEL: label(job_id)},
            "annotations": {JOB_ID: job_id},
        },
        "data": {"job": job_id, **(files or {})},
    }


def owned_by(root: Mapping[str, Any]) -> list[Manifest]:
    """The owner reference to the job's root ConfigMap (as the API returned it)."""
    meta = root["metadata"]
    return [{"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"]}]


def secret_variables(launch: TaskLaunch) -> dict[str, str]:
    """The variables of ``launch`` whose values hold a secret (its masked values): they go
    in a Secret, never in the Pod's own manifest, which anyone who may list pods reads."""
    return {
        name: value
        for name, value in launch.env.items()
        if any(secret.decode(errors="replace") in value for secret in launch.mask)
    }


def workdir_secret_name(job_id: str) -> str:
    """The job's Secret that holds its folder's token (``volumes.Fetched``)."""
    return f"{root_name(job_id)}-workdir"


def secret_manifest(
    name: str, namespace: str, values: Mapping[str, str], owners: list[Manifest]
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(MANAGED),
            "ownerReferences": owners,
        },
        "type": "Opaque",
        "stringData": dict(values),
    }


def pod_manifest(
    launch: TaskLaunch,
    *,
    job_id: str,
    attempt: int,
    namespace: str,
    node: str,
    grace_period: float,
    node_lost_seconds: int,
    owners: list[Manifest],
    files: PodFiles,
    secret: str | None = None,
) -> Manifest:
    """The Pod that runs ``launch`` on ``node``, with ``files`` (``volumes``); ``secret``:
    the Secret that holds its variables with secret values (``secret_variables``)."""
    role, index = launch.key
    name = pod_name(job_id, launch.key, attempt)
    hidden = secret_variables(launch) if secret else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                **MANAGED,
                JOB_LABEL: label(job_id),
                ROLE: label(role),
                INDEX: str(index),
                ATTEMPT: str(attempt),
            },
            "annotations": {JOB_ID: job_id, ROLE: role},
            "ownerReferences": owners,
            "finalizers": [FINALIZER],
        },
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "restartPolicy": "Never",  # trainfleet restarts, by the job's policies
            # The pause container is PID 1, as an init is in a local container: SIGTERM
            # reaches a task that sets no handler for it (a PID 1 would ignore it).
            "shareProcessNamespace": True,
            "terminationGracePeriodSeconds": max(0, round(grace_period)),
            "automountServiceAccountToken": False,  # a task has no business with the API
            "enableServiceLinks": False,
            "tolerations": [
                {
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": node_lost_seconds,
                }
                for taint in LOST_TAINTS
            ],
            **_security(launch),
            "initContainers": [
                {"imagePullPolicy": PULL_POLICY[launch.pull], **init}
                for init in files.init_containers
            ],
            "containers": [_container(launch, hidden, secret, files.mounts)],
            "volumes": files.volumes,
        },
    }


def _security(launch: TaskLaunch) -> Manifest:
    """The team's account, not the image's user, where the job has one."""
    if launch.account is None:
        return {}
    return {
        "securityContext": {
            "runAsUser": launch.account.uid,
            "runAsGroup": launch.account.gid,
            "fsGroup": launch.account.gid,  # its secret files are its group's to read
            "runAsNonRoot": True,
        }
    }


def _container(
    launch: TaskLaunch, hidden: Mapping[str, str], secret: str | None, mounts: list[Manifest]
) -> Manifest:
    container: Manifest = {
        "name": "task",
        "image": launch.image,
        "imagePullPolicy": PULL_POLICY[launch.pull],
    }
    if launch.entrypoint:  # the image's ENTRYPOINT runs, given argv as its arguments
        container["args"] = list(launch.argv)
    else:  # the command replaces the ENTRYPOINT
        container["command"] = [launch.argv[0]]
        container["args"] = list(launch.argv[1:])
    if not launch.image_workdir:
        container["workingDir"] = str(launch.cwd)
    env: list[Manifest] = []
    for variable, value in launch.env.items():
        if variable in GPU_VARIABLES and launch.resources.gpu:
            continue  # the cluster's device plugin says which GPUs the container has
        if variable in hidden:
            reference = {"name": secret, "key": variable}
            env.append({"name": variable, "valueFrom": {"secretKeyRef": reference}})
        else:
            env.append({"name": variable, "value": value})
    container["env"] = env
    container["resources"] = _resources(launch)
    container["volumeMounts"] = mounts
    container["securityContext"] = {"allowPrivilegeEscalation": False}
    return container


def _resources(launch: TaskLaunch) -> Manifest:
    """Requests as the role asks, and the same as limits (as ``--cpus``/``--memory``)."""
    wanted = launch.resources
    amounts: dict[str, str] = {}
    if wanted.cpu:
        amounts["cpu"] = f"{wanted.cpu}m"
    if wanted.memory:
        amounts["memory"] = str(wanted.memory)
    if wanted.gpu:
        amounts[GPU_RESOURCE] = str(round(wanted.gpu))
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}
