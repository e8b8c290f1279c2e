"""Export a JobSpec as a Kubeflow Trainer ``TrainJob`` on a built-in runtime.

A job of one role, ``worker``, becomes a TrainJob whose ``runtimeRef`` is the built-in runtime
of its framework (pytorch -> torch-distributed, jax -> jax-distributed, xgboost ->
xgboost-distributed) and whose ``trainer`` holds the role's image, command and args, env,
replicas (``numNodes``), resources (``resourcesPerNode``) and, for torch, ``nproc_per_node``
(``numProcPerNode``); the queue becomes Kueue's ``kueue.x-k8s.io/queue-name`` label and the
deadline ``activeDeadlineSeconds``. Reading the export back gives the same job
(``tests/spec/test_trainjob.py``).

What a TrainJob's trainer cannot say (mounts, a working directory, other roles) is refused
with the field named; what only changes how trainfleet runs the job here is listed as left out.
"""

from __future__ import annotations

from typing import Any

from trainfleet.spec.errors import Problem, SpecError
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.kubeflow_export import left_out, replica_of
from trainfleet.spec.models import JobSpec, RestartPolicy
from trainfleet.spec.trainjob import API_VERSION, QUEUE_LABEL, TRAINER_STEP

RUNTIME_OF = {
    Framework.PYTORCH: "torch-distributed",
    Framework.JAX: "jax-distributed",
    Framework.XGBOOST: "xgboost-distributed",
}
"""The built-in ClusterTrainingRuntime that runs each framework's jobs."""
_TRAINER_FIELDS = (("image", "image"), ("command", "command"), ("args", "args"), ("env", "env"))


def trainjob_of(spec: JobSpec, file: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The TrainJob of ``spec`` (read from ``file``), and what it leaves out; SpecError
    naming every field a TrainJob cannot express."""
    problems: list[Problem] = []

    def refuse(path: str, message: str) -> None:
        problems.append(Problem(file, None, path, message))

    runtime = RUNTIME_OF.get(spec.framework)
    if runtime is None:
        known = ", ".join(sorted(framework.value for framework in RUNTIME_OF))
        refuse("framework", f"{spec.framework.value!r} has no built-in training runtime ({known})")
    if spec.environment is not None:
        refuse("environment", "a per-job Python environment has no TrainJob form: use an image")
    for name in spec.roles:
        if name != "worker":
            refuse(f"roles.{name}", "a TrainJob runs one role, worker (node 0 is the master)")
    worker = spec.roles.get("worker")
    if worker is None:
        refuse("roles", "needs the role worker: the TrainJob's nodes")
    if worker is None:
        raise SpecError(problems)
    replica = replica_of(spec, "worker", worker, TRAINER_STEP, refuse)
    container = replica["template"]["spec"]["containers"][0]
    if worker.mounts:
        refuse("roles.worker.mounts", "a TrainJob's trainer has no volumes: use a runtime file")
    if worker.working_dir is not None:
        refuse("roles.worker.working_dir", "a TrainJob's trainer has no working directory")
    trainer: dict[str, Any] = {"numNodes": worker.replicas}
    for ours, theirs in _TRAINER_FIELDS:
        if ours in container:
            trainer[theirs] = container[ours]
    if "resources" in container:
        trainer["resourcesPerNode"] = container["resources"]
    if spec.pytorch is not None and spec.pytorch.nproc_per_node != 1:
        nproc = spec.pytorch.nproc_per_node
        if not isinstance(nproc, int):
            refuse("pytorch.nproc_per_node", f"{nproc!r}: a TrainJob counts processes as a number")
        trainer["numProcPerNode"] = nproc
        if spec.pytorch.elastic is not None:
            refuse("pytorch.elastic", "has no TrainJob form on the built-in torch runtime")
    if problems or runtime is None:
        raise SpecError(problems)
    labels = dict(spec.labels)
    if spec.queue != "default":
        labels[QUEUE_LABEL] = spec.queue
    metadata: dict[str, Any] = {"name": spec.name}
    if labels:
        metadata["labels"] = labels
    body: dict[str, Any] = {"runtimeRef": {"name": runtime}, "trainer": trainer}
    if spec.deadline is not None:
        body["activeDeadlineSeconds"] = max(1, round(spec.deadline))
    manifest = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": body}
    return manifest, _left_out(spec, container)


def _left_out(spec: JobSpec, container: dict[str, Any]) -> list[str]:
    found = left_out(spec)
    if "imagePullPolicy" in container:
        found.append("not exported: roles.worker.pull: the cluster's pull policy applies")
    if spec.restart_policy_of("worker") is not RestartPolicy.NEVER:
        found.append("not exported: restart: the runtime's failurePolicy decides")
    if spec.grace_period != JobSpec.model_fields["grace_period"].default:
        found.append("not exported: grace_period: the runtime's pods have their own")
    return found
