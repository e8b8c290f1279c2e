"""Import Kubeflow training-operator manifests as a JobSpec.

Supported kinds are TFJob, PyTorchJob, JAXJob, XGBoostJob (``kubeflow.org/v1``) and MPIJob
(``v1`` of the training operator or ``v2beta1`` of the MPI operator; Open MPI only: the
workers hold their places while the launcher's ``mpirun`` starts the ranks, see
``frameworks/mpi.py``). Each replica type becomes a role of the same name in lower case
(``PS`` -> ``ps``) with its own restart policy; the first container (or the one named after
the framework, or ``mainContainer``) gives the command, environment, resources, working
directory, image and pull policy, and its ``hostPath`` volumes become mounts. Fields that only
mean something to Kubernetes (ports, node selectors, ...) are ignored. A container with an
image runs in that image (see ``RoleSpec.image``): ``args`` without a ``command`` go to its
ENTRYPOINT, as on Kubernetes. Errors name the manifest's own field path and line, e.g.
``spec.tfReplicaSpecs.Worker.replicas``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from trainfleet.spec.errors import (
    Path,
    Problem,
    SourceMap,
    SpecError,
    brief,
    format_path,
    spec_error_from_validation,
)
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.limits import JobLimits, check_limits
from trainfleet.spec.models import JobSpec, RestartPolicy

API_VERSION = "kubeflow.org/v1"


@dataclass(frozen=True)
class KindInfo:
    """What differs between the Kubeflow job kinds."""

    framework: Framework
    replica_field: str
    container: str
    replica_types: tuple[str, ...]
    default_restart: str
    api_version: str = "kubeflow.org/v1"
    """The version trainfleet exports (and reads)."""
    also_reads: tuple[str, ...] = ()
    """Other versions of the kind whose fields trainfleet reads the same way."""


KINDS = {
    "TFJob": KindInfo(
        Framework.TENSORFLOW,
        "tfReplicaSpecs",
        "tensorflow",
        ("Chief", "Master", "Worker", "PS", "Evaluator"),
        "Never",
    ),
    "PyTorchJob": KindInfo(
        Framework.PYTORCH, "pytorchReplicaSpecs", "pytorch", ("Master", "Worker"), "OnFailure"
    ),
    "JAXJob": KindInfo(Framework.JAX, "jaxReplicaSpecs", "jax", ("Worker",), "Never"),
    "XGBoostJob": KindInfo(
        Framework.XGBOOST, "xgbReplicaSpecs", "xgboost", ("Master", "Worker"), "Never"
    ),
    "MPIJob": KindInfo(
        Framework.MPI,
        "mpiReplicaSpecs",
        "mpi",
        ("Launcher", "Worker"),
        "Never",
        also_reads=("kubeflow.org/v2beta1",),
    ),
}
"""Kind -> its framework, replica spec field, default container, replica types and restart."""

RESTART_POLICIES = {
    "Never": RestartPolicy.NEVER,
    "OnFailure": RestartPolicy.ON_FAILURE,
    "Always": RestartPolicy.ALWAYS,
    "ExitCode": RestartPolicy.EXIT_CODE,
}
_RESOURCES = (("cpu", "cpu"), ("memory", "memory"), ("gpu", "nvidia.com/gpu"))


class _K8s(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class EnvVar(_K8s):
    name: str
    value: Any = None
    valueFrom: Any = None


def _secret_ref(value_from: Any) -> dict[str, Any] | None:
    """``valueFrom: {secretKeyRef: {name, key}}`` as trainfleet's ``{secret, key}``."""
    ref = value_from.get("secretKeyRef") if isinstance(value_from, dict) else None
    if not isinstance(ref, dict) or set(value_from) != {"secretKeyRef"}:
        return None
    name, key = ref.get("name"), ref.get("key")
    if not isinstance(name, str) or not isinstance(key, str):
        return None
    return {"secret": name, "key": key}


PULL_POLICIES = {"Always": "always", "IfNotPresent": "if-missing", "Never": "never"}


class ResourceRequirements(_K8s):
    limits: dict[str, Any] = Field(default_factory=dict)
    requests: dict[str, Any] = Field(default_factory=dict)


class VolumeMount(_K8s):
    name: str
    mountPath: str
    readOnly: bool = False
    subPath: str | None = None


class HostPath(_K8s):
    path: str


class Volume(BaseModel):
    """A pod's volume: its kind is the one other key beside ``name``."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str
    hostPath: HostPath | None = None

    @property
    def kind(self) -> str:
        return "hostPath" if self.hostPath else next(iter(self.model_extra or {}), "unknown")


class Container(_K8s):
    name: str | None = None
    image: str | None = None
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = None
    volumeMounts: list[VolumeMount] = Field(default_factory=list)
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] = Field(default_factory=list)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    workingDir: str | None = None


class PodSpec(_K8s):
    containers: Annotated[list[Container], Field(min_length=1)]
    volumes: list[Volume] = Field(default_factory=list)
    terminationGracePeriodSeconds: StrictInt | None = None


class PodTemplate(_K8s):
    spec: PodSpec


class ReplicaSpec(_K8s):
    replicas: StrictInt | None = None
    template: PodTemplate
    restartPolicy: Literal["Never", "OnFailure", "Always", "ExitCode"] | None = None


class SchedulingPolicy(_K8s):
    queue: str | None = None


class RunPolicy(_K8s):
    backoffLimit: StrictInt | None = None
    activeDeadlineSeconds: StrictInt | None = None
    schedulingPolicy: SchedulingPolicy = Field(default_factory=SchedulingPolicy)


class ElasticPolicy(_K8s):
    minReplicas: StrictInt | None = None
    maxReplicas: StrictInt | None = None
    rdzvBackend: str | None = None
    maxRestarts: StrictInt | None = None
    nProcPerNode: StrictInt | None = None


ReplicaSpecs = dict[str, ReplicaSpec] | None


class Spec(_K8s):
    tfReplicaSpecs: ReplicaSpecs = None
    pytorchReplicaSpecs: ReplicaSpecs = None
    jaxReplicaSpecs: ReplicaSpecs = None
    xgbReplicaSpecs: ReplicaSpecs = None
    mpiReplicaSpecs: ReplicaSpecs = None
    runPolicy: RunPolicy = Field(default_factory=RunPolicy)
    successPolicy: str | None = None
    nprocPerNode: int | str | None = None
    elasticPolicy: ElasticPolicy | None = None
    slotsPerWorker: StrictInt | None = None
    mainContainer: str | None = None
    mpiImplementation: str | None = None
    runLauncherAsWorker: bool | None = None
    sshAuthMountPath: str | None = None


class Metadata(_K8s):
    name: str
    labels: dict[str, Any] = Field(default_factory=dict)


class Manifest(_K8s):
    """The part of a Kubeflow job manifest that trainfleet reads."""

    apiVersion: str
    kind: str
    metadata: Metadata
    spec: Spec


def job_from_manifest(
    data: Mapping[Hashable, Any],
    source: SourceMap | None = None,
    limits: JobLimits | None = None,
) -> tuple[JobSpec, list[str]]:
    """The JobSpec of a Kubeflow training-operator manifest (a TrainJob is
    ``trainjob.job_from_trainjob``'s), and warnings about what is ignored locally.

    ``source`` gives the file and the line of every key path, for errors; ``limits`` the
    most roles and tasks (the defaults when not given).
    """
    source = source or SourceMap()
    kind = _check_header(data, source)
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as error:
        raise spec_error_from_validation(error, data, source, model=Manifest) from None
    converter = _Converter(manifest, KINDS[kind], source)
    return converter.job_spec(converter.job(), limits or JobLimits())


def _check_header(data: Mapping[Hashable, Any], source: SourceMap) -> str:
    kind, api = data.get("kind"), data.get("apiVersion")
    supported = ", ".join([*KINDS, "TrainJob"])
    if kind is None:
        raise SpecError([source.problem(("kind",), f"is required: one of {supported}")])
    if not isinstance(kind, str) or kind not in KINDS:
        message = f"unknown kind {brief(kind)}: supported kinds are {supported}"
        raise SpecError([source.problem(("kind",), message)])
    info = KINDS[kind]
    expected = " or ".join((info.api_version, *info.also_reads))
    if api is None:
        raise SpecError([source.problem(("apiVersion",), f"is required: {expected}")])
    if api not in (info.api_version, *info.also_reads):
        message = f"unsupported apiVersion {brief(api)} for {kind}: trainfleet reads {expected}"
        raise SpecError([source.problem(("apiVersion",), message)])
    return kind


class PodFields:
    """Reads a pod's container into role fields, remembering where each value came from
    (``origin``: JobSpec path -> manifest path) and what cannot be read (``problems``)."""

    def __init__(self, source: SourceMap) -> None:
        self.source = source
        self.origin: dict[Path, Path] = {(): ()}
        self.problems: list[Problem] = []
        self.warnings: list[str] = []

    def _problem(self, path: Path, message: str) -> None:
        self.problems.append(self.source.problem(path, message))

    def job_spec(self, job: dict[str, Any], limits: JobLimits) -> tuple[JobSpec, list[str]]:
        """The JobSpec of the ``job`` this read, within ``limits``, and the warnings;
        SpecError naming the manifest's own fields (every problem found while reading)."""
        if self.problems:
            raise SpecError(self.problems)
        try:
            spec = JobSpec.model_validate(job)
        except ValidationError as error:
            origin = self.origin
            raise spec_error_from_validation(error, job, self.source, origin=origin) from None
        check_limits(spec, limits, self.source, self.origin)
        return spec, self.warnings

    def container(self, pod: PodSpec, index: int, target: Path, cpath: Path) -> dict[str, Any]:
        """The role fields (at ``target``) of ``pod``'s container ``index`` (at ``cpath``):
        command and args, env, resources, working directory, image, pull policy, mounts."""
        container = pod.containers[index]
        out: dict[str, Any] = {}
        out.update(self._command(container, cpath, target))
        out["env"] = self._env(container, cpath, target)
        out["resources"] = self._resources(container, cpath, target)
        if container.workingDir is not None:
            out["working_dir"] = container.workingDir
            self.origin[(*target, "working_dir")] = (*cpath, "workingDir")
        elif container.image is not None:  # as Kubernetes runs it: in the image's WORKDIR
            out["image_workdir"] = True
        if container.image is not None:
            out["image"] = container.image
            self.origin[(*target, "image")] = (*cpath, "image")
        if container.imagePullPolicy is not None:
            out["pull"] = PULL_POLICIES[container.imagePullPolicy]
            self.origin[(*target, "pull")] = (*cpath, "imagePullPolicy")
        mounts = self._mounts(pod.volumes, container, cpath[:-3], cpath)
        if mounts:
            out["mounts"] = mounts
            self.origin[(*target, "mounts")] = (*cpath, "volumeMounts")
        return out

    def _command(self, container: Container, cpath: Path, target: Path) -> dict[str, Any]:
        """The role's ``command`` and ``args`` (an image's ENTRYPOINT runs without a command)."""
        if not container.command and container.image is None:
            message = "is required: a container without an image runs its command"
            self._problem((*cpath, "command"), message)
            return {}
        out: dict[str, Any] = {}
        for field, words in (("command", container.command), ("args", container.args)):
            if words:
                out[field] = words
                self.origin[(*target, field)] = (*cpath, field)
                for i in range(len(words)):
                    self.origin[(*target, field, i)] = (*cpath, field, i)
        return out

    def _mounts(
        self, volumes: list[Volume], container: Container, tpath: Path, cpath: Path
    ) -> list[dict[str, Any]]:
        """The container's ``hostPath`` volume mounts as mounts; other kinds of volume have
        no meaning outside Kubernetes: their mounts are left out with a warning."""
        by_name = {volume.name: (index, volume) for index, volume in enumerate(volumes)}
        mounts = []
        for n, mount in enumerate(container.volumeMounts):
            found = by_name.get(mount.name)
            if found is None:
                known = ", ".join(by_name) or "none"
                message = f"names no volume of the pod ({mount.name!r}; volumes: {known})"
                self._problem((*cpath, "volumeMounts", n, "name"), message)
                continue
            index, volume = found
            if volume.hostPath is None:
                where = format_path((*tpath, "spec", "volumes", index))
                self.warnings.append(
                    f"{where}: {volume.kind} volume {volume.name!r} is not supported here "
                    f"(only hostPath): its mount at {mount.mountPath} is left out"
                )
                continue
            source = volume.hostPath.path
            if mount.subPath:
                source = f"{source.rstrip('/')}/{mount.subPath}"
            mounts.append(
                {"source": source, "target": mount.mountPath, "read_only": mount.readOnly}
            )
        return mounts

    def _env(self, container: Container, cpath: Path, target: Path) -> dict[str, Any]:
        env: dict[str, Any] = {}
        self.origin[(*target, "env")] = (*cpath, "env")
        for i, var in enumerate(container.env):
            if var.valueFrom is not None:
                secret = _secret_ref(var.valueFrom)
                if secret is None:
                    message = (
                        "only a secretKeyRef with a name and a key is read (a secret of the "
                        "job's team on the server); "
                        f"config maps and pod fields exist only in Kubernetes: give {var.name} "
                        "a value"
                    )
                    self._problem((*cpath, "env", i, "valueFrom"), message)
                    continue
                env[var.name] = secret
                self.origin[(*target, "env", var.name)] = (*cpath, "env", i, "valueFrom")
                continue
            env[var.name] = "" if var.value is None else var.value
            self.origin[(*target, "env", var.name)] = (*cpath, "env", i, "value")
        return env

    def _resources(self, container: Container, cpath: Path, target: Path) -> dict[str, Any]:
        """cpu, memory and nvidia.com/gpu; a limit wins over a request."""
        out: dict[str, Any] = {}
        for ours, theirs in _RESOURCES:
            for section in ("limits", "requests"):
                values: dict[str, Any] = getattr(container.resources, section)
                if theirs in values:
                    out[ours] = values[theirs]
                    source: Path = (*cpath, "resources", section, theirs)
                    if ours == "gpu" and not _whole_number(values[theirs]):
                        self._problem(
                            source,
                            "Kubernetes counts nvidia.com/gpu in whole GPUs; for a shared "
                            "fraction of one, write a trainfleet job file with gpu: 0.5",
                        )
                        del out[ours]
                    self.origin[(*target, "resources", ours)] = source
                    break
        return out


class _Converter(PodFields):
    """Builds the JobSpec input from a manifest, remembering where each value came from."""

    def __init__(self, manifest: Manifest, kind: KindInfo, source: SourceMap) -> None:
        super().__init__(source)
        self.manifest = manifest
        self.kind = kind
        self.specs_path: Path = ("spec", kind.replica_field)
        self.origin[("roles",)] = self.specs_path

    def job(self) -> dict[str, Any]:
        spec, meta = self.manifest.spec, self.manifest.metadata
        job: dict[str, Any] = {"name": meta.name, "framework": self.kind.framework}
        self.origin |= {("name",): ("metadata", "name"), ("framework",): ("kind",)}
        specs = self._specs()
        job["roles"] = self._roles(specs)
        job["restart"] = self._restart(specs, job["roles"])
        job["labels"] = dict(meta.labels)
        self.origin[("labels",)] = ("metadata", "labels")
        for key in meta.labels:
            self.origin[("labels", key)] = ("metadata", "labels", key)
        if spec.runPolicy.activeDeadlineSeconds is not None:
            job["deadline"] = spec.runPolicy.activeDeadlineSeconds
            self.origin[("deadline",)] = ("spec", "runPolicy", "activeDeadlineSeconds")
        if spec.runPolicy.schedulingPolicy.queue is not None:
            job["queue"] = spec.runPolicy.schedulingPolicy.queue
            self.origin[("queue",)] = ("spec", "runPolicy", "schedulingPolicy", "queue")
        graces = {
            name: replica.template.spec.terminationGracePeriodSeconds
            for name, replica in specs.items()
            if replica.template.spec.terminationGracePeriodSeconds is not None
        }
        if graces:  # the longest: every task gets at least its own
            longest = max(graces, key=lambda name: graces[name])
            job["grace_period"] = graces[longest]
            path = (*self.specs_path, longest, "template", "spec", "terminationGracePeriodSeconds")
            self.origin[("grace_period",)] = path
        if spec.successPolicy == "AllWorkers":
            job["success"] = "all-workers"
        elif spec.successPolicy:
            message = (
                f"unknown successPolicy {spec.successPolicy!r}: use AllWorkers or leave it empty"
            )
            self._problem(("spec", "successPolicy"), message)
        if self.kind.framework is Framework.PYTORCH:
            pytorch = self._pytorch(job["roles"])
            if pytorch:
                job["pytorch"] = pytorch
        if self.kind.framework is Framework.MPI:
            mpi = self._mpi(job["roles"])
            if mpi:
                job["mpi"] = mpi
        return job

    def _specs(self) -> dict[str, ReplicaSpec]:
        specs: dict[str, ReplicaSpec] | None = getattr(self.manifest.spec, self.kind.replica_field)
        if specs is None:
            types = ", ".join(self.kind.replica_types)
            self._problem(self.specs_path, f"is required: the replica types to run ({types})")
        elif not specs:
            self._problem(self.specs_path, "must name at least one replica type")
        return specs or {}

    def _roles(self, specs: dict[str, ReplicaSpec]) -> dict[str, Any]:
        roles: dict[str, Any] = {}
        first: dict[str, str] = {}
        allowed = {name.lower(): name for name in self.kind.replica_types}
        for type_name, replica in specs.items():
            path = (*self.specs_path, type_name)
            role = type_name.lower()
            if role not in allowed:
                expected = ", ".join(self.kind.replica_types)
                self._problem(path, f"unknown replica type {type_name!r}: expected {expected}")
            elif role in first:
                message = (
                    f"replica types {first[role]!r} and {type_name!r} collide: "
                    f"both become role {role!r}; keep one"
                )
                self._problem(path, message)
            else:
                first[role] = type_name
                self.origin[("roles", role)] = path
                roles[role] = self._role(role, replica, path)
        return roles

    def _role(self, role: str, replica: ReplicaSpec, path: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        target: Path = ("roles", role)
        if replica.replicas is not None:
            out["replicas"] = replica.replicas
            self.origin[(*target, "replicas")] = (*path, "replicas")
        containers = replica.template.spec.containers
        name = self.manifest.spec.mainContainer or self.kind.container
        index = next((i for i, c in enumerate(containers) if c.name == name), 0)
        cpath: Path = (*path, "template", "spec", "containers", index)
        out.update(self.container(replica.template.spec, index, target, cpath))
        return out

    def _restart(self, specs: dict[str, ReplicaSpec], roles: dict[str, Any]) -> dict[str, Any]:
        """The job's policy is its workers' (else its first replica type's); a replica type
        whose policy differs keeps its own, as its role's ``restart_policy``."""
        spec = self.manifest.spec
        chosen: tuple[str, str, Path | None] | None = None
        policies: dict[str, str] = {}
        for type_name, replica in specs.items():
            policy = replica.restartPolicy or self.kind.default_restart
            path = (*self.specs_path, type_name, "restartPolicy") if replica.restartPolicy else None
            policies[type_name] = policy
            if chosen is None or type_name.lower() == "worker":
                chosen = (type_name, policy, path)
        restart: dict[str, Any] = {}
        if chosen is not None:
            type_name, policy, path = chosen
            restart["policy"] = RESTART_POLICIES[policy]
            if path is not None:
                self.origin[("restart", "policy")] = path
            for other, own in policies.items():
                role = other.lower()
                if own != policy and role in roles:
                    roles[role]["restart_policy"] = RESTART_POLICIES[own]
                    origin = (*self.specs_path, other, "restartPolicy")
                    self.origin[("roles", role, "restart_policy")] = origin
        if spec.runPolicy.backoffLimit is not None:
            restart["max_restarts"] = spec.runPolicy.backoffLimit
            self.origin[("restart", "max_restarts")] = ("spec", "runPolicy", "backoffLimit")
        return restart

    def _mpi(self, roles: dict[str, Any]) -> dict[str, Any]:
        """slotsPerWorker; Open MPI only. A worker's sshd is not run (a worker without a
        command holds its place, see ``JobSpec``): mpirun starts the ranks without ssh."""
        spec = self.manifest.spec
        if spec.mpiImplementation not in (None, "OpenMPI"):
            message = f"{spec.mpiImplementation!r} is not supported here: only OpenMPI"
            self._problem(("spec", "mpiImplementation"), message)
        if spec.runLauncherAsWorker:
            message = "is not supported here: give the ranks to the workers (slotsPerWorker)"
            self._problem(("spec", "runLauncherAsWorker"), message)
        if spec.sshAuthMountPath is not None:
            self.warnings.append(
                "spec.sshAuthMountPath: not used, trainfleet's mpirun starts the ranks without ssh"
            )
        worker = roles.get("worker") or {}
        command = worker.get("command")
        if command and command[0].rsplit("/", 1)[-1] == "sshd":
            where = format_path(self.origin[("roles", "worker", "command")])
            self.warnings.append(
                f"{where}: sshd is not started: the workers hold their places and the "
                "launcher's mpirun starts the ranks without ssh"
            )
            worker.pop("command")
            worker.pop("args", None)
        if spec.slotsPerWorker is None:
            return {}
        self.origin[("mpi", "slots_per_worker")] = ("spec", "slotsPerWorker")
        return {"slots_per_worker": spec.slotsPerWorker}

    def _pytorch(self, roles: dict[str, Any]) -> dict[str, Any]:
        """nprocPerNode and elasticPolicy, with Kubeflow's defaults for missing bounds."""
        spec = self.manifest.spec
        out: dict[str, Any] = {}
        nproc: int | str | None = spec.nprocPerNode
        nproc_path: Path = ("spec", "nprocPerNode")
        elastic = spec.elasticPolicy
        if nproc is None and elastic is not None and elastic.nProcPerNode is not None:
            nproc, nproc_path = elastic.nProcPerNode, ("spec", "elasticPolicy", "nProcPerNode")
        if nproc is not None:
            out["nproc_per_node"] = _nproc(nproc)
            self.origin[("pytorch", "nproc_per_node")] = nproc_path
        if elastic is not None:
            workers = roles.get("worker", {}).get("replicas", 1)
            low = elastic.minReplicas if elastic.minReplicas is not None else elastic.maxReplicas
            high = elastic.maxReplicas if elastic.maxReplicas is not None else elastic.minReplicas
            policy: dict[str, Any] = {
                "min_replicas": workers if low is None else low,
                "max_replicas": workers if high is None else high,
            }
            if elastic.rdzvBackend is not None:
                policy["rdzv_backend"] = elastic.rdzvBackend
            if elastic.maxRestarts is not None:
                policy["max_restarts"] = elastic.maxRestarts
            out["elastic"] = policy
            base: Path = ("spec", "elasticPolicy")
            self.origin[("pytorch", "elastic")] = base
            given = elastic.model_dump(exclude_none=True)
            for ours, theirs in (
                ("min_replicas", "minReplicas"),
                ("max_replicas", "maxReplicas"),
                ("rdzv_backend", "rdzvBackend"),
                ("max_restarts", "maxRestarts"),
            ):
                self.origin[("pytorch", "elastic", ours)] = (
                    (*base, theirs) if theirs in given else base
                )
        return out


def _nproc(value: int | str) -> int | str:
    """``"2"`` -> 2; ``"auto"``, ``"gpu"``, ``"cpu"`` and ints stay as they are."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
        return int(value)
    return value


def _whole_number(value: Any) -> bool:
    try:
        return float(value) == int(float(value))
    except (TypeError, ValueError, OverflowError):
        return True  # not a number at all: the model says so
