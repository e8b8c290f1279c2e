"""Export a JobSpec as the Kubeflow training-operator manifest that runs the same job.

The inverse of ``spec/kubeflow.py``: each role becomes the replica type of its name
(``ps`` -> ``PS``) with one container (named after the framework, as Kubeflow expects)
holding the role's image, command and args, environment, working directory, resources,
mounts (as ``hostPath`` volumes) and pull policy; the job's restart policy goes to each
replica type, its restart limit and deadline to ``runPolicy``. Reading the export back
gives the same job (``tests/spec/test_kubeflow_export.py``).

A job that Kubernetes cannot run as it is, is refused with every reason at once, each
naming the field: a role without an image, a fractional GPU, a per-job Python
environment, a role with no replica type of its kind, trainfleet's own TensorFlow server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainfleet.spec.errors import Problem, SpecError
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.kubeflow import KINDS, PULL_POLICIES, RESTART_POLICIES
from trainfleet.spec.models import JobSpec, RestartSpec, RoleSpec, SecretRef
from trainfleet.spec.quantity import format_cpu, format_memory
from trainfleet.spec.rendezvous import ROLE as RENDEZVOUS_ROLE

Refuse = Callable[[str, str], None]

KIND_OF = {info.framework: kind for kind, info in KINDS.items()}
"""The Kubeflow kind that runs each framework's jobs."""
POLICY_NAMES = {policy: name for name, policy in RESTART_POLICIES.items()}
PULL_NAMES = {ours: theirs for theirs, ours in PULL_POLICIES.items()}


def manifest_of(spec: JobSpec, file: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The Kubeflow manifest of ``spec`` (read from ``file``), and what it leaves out that
    only changes how trainfleet runs it here; SpecError naming every field it cannot
    express."""
    problems: list[Problem] = []

    def refuse(path: str, message: str) -> None:
        problems.append(Problem(file, None, path, message))

    kind = KIND_OF.get(spec.framework)
    if kind is None:
        frameworks = ", ".join(sorted(info.framework.value for info in KINDS.values()))
        refuse("framework", f"{spec.framework.value!r} has no Kubeflow kind ({frameworks})")
        raise SpecError(problems)
    info = KINDS[kind]
    if spec.environment is not None:
        refuse("environment", "a per-job Python environment has no Kubeflow form: use an image")
    if spec.success not in ("default", "all-workers") or (
        spec.success == "all-workers" and spec.framework is not Framework.TENSORFLOW
    ):
        refuse("success", f"{spec.success!r} has no {kind} form (TFJob has AllWorkers)")
    types = {name.lower(): name for name in info.replica_types}
    replicas: dict[str, Any] = {}
    for name, role in spec.roles.items():
        if name == RENDEZVOUS_ROLE and spec.hosts_rendezvous():
            continue  # the operator hosts the rendezvous itself
        if name not in types:
            expected = ", ".join(t.lower() for t in info.replica_types)
            refuse(f"roles.{name}", f"a {kind} has no replica type for it (roles: {expected})")
            continue
        replicas[types[name]] = replica_of(spec, name, role, info.container, refuse)
    if problems:
        raise SpecError(problems)
    run_policy: dict[str, Any] = {"backoffLimit": spec.restart.max_restarts}
    if spec.queue != "default":
        run_policy["schedulingPolicy"] = {"queue": spec.queue}
    if spec.deadline is not None:
        run_policy["activeDeadlineSeconds"] = max(1, round(spec.deadline))
    body: dict[str, Any] = {info.replica_field: replicas, "runPolicy": run_policy}
    if spec.success == "all-workers" and spec.framework is Framework.TENSORFLOW:
        body["successPolicy"] = "AllWorkers"
    if spec.pytorch is not None:
        body.update(_pytorch(spec))
    if spec.mpi is not None:
        body["slotsPerWorker"] = spec.mpi.slots_per_worker
    metadata: dict[str, Any] = {"name": spec.name}
    if spec.labels:
        metadata["labels"] = dict(spec.labels)
    manifest = {"apiVersion": info.api_version, "kind": kind, "metadata": metadata, "spec": body}
    return manifest, left_out(spec)


def left_out(spec: JobSpec) -> list[str]:
    """What the manifest does not carry: settings of how trainfleet runs the job here."""
    found = []
    if spec.priority:
        found.append(f"priority {spec.priority}: Kubernetes orders pods by PriorityClass")
    default = RestartSpec()
    if spec.restart.backoff != default.backoff:
        found.append("restart.backoff: the operator has its own")
    if spec.restart.scope is not None:
        found.append(f"restart.scope {spec.restart.scope}: the operator decides")
    if spec.restart.max_infrastructure != default.max_infrastructure:
        found.append("restart.max_infrastructure: Kubernetes reschedules lost pods itself")
    if spec.restart.requeue_exit_code is not None:
        found.append("restart.requeue_exit_code: restartPolicy ExitCode retries 128-255 only")
    if spec.progress is not None:
        found.append("progress: no stall detection in the operator")
    for name in ("input_path", "checkpoint_path"):
        if getattr(spec, name) is not None:
            found.append(f"{name}: give it to the container yourself (a volume, an env)")
    folder = "the job's folder is not exported (a pod has none: give it a volume there)"
    if spec.workdir_mount is not None:
        found.append(f"workdir_mount {spec.workdir_mount}: {folder}")
    for name, role in spec.roles.items():
        if name == RENDEZVOUS_ROLE and spec.hosts_rendezvous():
            continue
        if role.port is not None:
            found.append(f"roles.{name}.port: the operator gives each replica type its port")
        if role.tracked is not None:
            found.append(f"roles.{name}.tracked: the operator decides by replica type")
        if role.workdir_mount is not None and spec.image_of(name):
            found.append(f"roles.{name}.workdir_mount {role.workdir_mount}: {folder}")
        if spec.image_of(name) and role.working_dir is None and not role.image_workdir:
            found.append(
                f"roles.{name}: the job's folder as working directory (a pod runs in the "
                "image's WORKDIR; give working_dir to choose one)"
            )
    return [f"not exported: {what}" for what in found]


def replica_of(
    spec: JobSpec, name: str, role: RoleSpec, container_name: str, refuse: Refuse
) -> dict[str, Any]:
    where = f"roles.{name}"
    image = spec.image_of(name)
    if image is None:
        refuse(f"{where}.image", "is required: Kubernetes runs every task in a container")
    if role.runs_tf_server():
        refuse(
            f"{where}.command",
            "trainfleet tf-server runs trainfleet's own program: use a TensorFlow server image",
        )
    if role.environment is not None:
        refuse(f"{where}.environment", "has no Kubeflow form: install it in the image")
    gpu = role.resources.gpu
    if gpu != int(gpu):
        refuse(f"{where}.resources.gpu", f"{gpu:g}: Kubernetes gives whole GPUs only")
    if role.resources.gpu_memory is not None:
        refuse(f"{where}.resources.gpu_memory", "Kubernetes gives whole GPUs only")
    container: dict[str, Any] = {"name": container_name, "image": image or ""}
    if role.command is not None:
        words = role.argv()
        container["command"] = words[: len(words) - len(role.args)]
    if role.args:
        container["args"] = list(role.args)
    if role.pull != "if-missing":
        container["imagePullPolicy"] = PULL_NAMES[role.pull]
    env = spec.env_of(name)
    if env:
        container["env"] = [_variable(key, value, where, refuse) for key, value in env.items()]
    if role.working_dir is not None:
        container["workingDir"] = role.working_dir
    limits = _limits(role)
    if limits:
        container["resources"] = {"limits": limits}
    pod: dict[str, Any] = {"containers": [container]}
    pod["terminationGracePeriodSeconds"] = max(0, round(spec.grace_period))
    if role.mounts:
        pod["volumes"] = [
            {"name": f"mount-{n}", "hostPath": {"path": mount.source}}
            for n, mount in enumerate(role.mounts)
        ]
        container["volumeMounts"] = [
            {"name": f"mount-{n}", "mountPath": mount.target, "readOnly": mount.read_only}
            for n, mount in enumerate(role.mounts)
        ]
    return {
        "replicas": role.replicas,
        "restartPolicy": POLICY_NAMES[spec.restart_policy_of(name)],
        "template": {"spec": pod},
    }


def _variable(name: str, value: str | SecretRef, where: str, refuse: Refuse) -> dict[str, Any]:
    """One ``env`` item of a container: a value, or a reference to a Kubernetes Secret of
    the same name and key (create it there with ``kubectl create secret generic``)."""
    if isinstance(value, str):
        return {"name": name, "value": value}
    if value.file:
        refuse(f"{where}.env.{name}", "a secret given as a file needs a volume: give it as a value")
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": value.secret, "key": value.key}}}


def _limits(role: RoleSpec) -> dict[str, Any]:
    wanted = role.resources
    limits: dict[str, Any] = {}
    if wanted.cpu:
        limits["cpu"] = format_cpu(wanted.cpu)
    if wanted.memory:
        limits["memory"] = format_memory(wanted.memory)
    if wanted.gpu:
        limits["nvidia.com/gpu"] = int(wanted.gpu)
    limits.update(wanted.custom)
    return limits


def _pytorch(spec: JobSpec) -> dict[str, Any]:
    options = spec.pytorch
    assert options is not None
    out: dict[str, Any] = {}
    if options.nproc_per_node != 1:
        out["nprocPerNode"] = str(options.nproc_per_node)
    elastic = options.elastic
    if elastic is not None:
        out["elasticPolicy"] = {
            "minReplicas": elastic.min_replicas,
            "maxReplicas": elastic.max_replicas,
            "rdzvBackend": elastic.rdzv_backend,
            "maxRestarts": elastic.max_restarts,
        }
    return out
