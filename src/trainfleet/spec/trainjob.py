"""Import Kubeflow Trainer v2 ``TrainJob`` manifests (``trainer.kubeflow.org/v1alpha1``).

A TrainJob names a training runtime (``spec.runtimeRef``): the built-in
``ClusterTrainingRuntime``s (torch-distributed, jax-distributed, xgboost-distributed,
deepspeed-distributed, kept unchanged in ``kubeflow_runtimes/``) or a ``TrainingRuntime`` /
``ClusterTrainingRuntime`` file given beside the job (``--runtime FILE``). The runtime's
``mlPolicy`` chooses the framework (torch -> pytorch, jax, xgboost) and its trainer step (the
replicated job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``, else the one
named ``node``) gives the pod; the TrainJob's ``trainer`` overrides it as Kubeflow does:

- ``numNodes`` (else the runtime's ``mlPolicy.numNodes``, else 1) -> role ``worker`` replicas
  (node 0 is rank 0, the master, as on Kubernetes);
- ``image``, ``command``, ``args`` replace the runtime container's; ``env`` is added to it (a
  name given in both takes the TrainJob's value); ``resourcesPerNode`` replaces its resources;
- ``numProcPerNode`` -> ``pytorch.nproc_per_node`` (torchrun's processes per node);
- ``activeDeadlineSeconds`` -> ``deadline``; the runtime's ``failurePolicy.maxRestarts`` ->
  the whole job restarts on failure that many times (JobSet recreates every job);
- the Kueue label ``kueue.x-k8s.io/queue-name`` -> ``queue``.

Dataset and model initializers, ``runtimePatches`` and runtimes with more than one step
(the MPI launcher of deepspeed-distributed, initializer steps) are refused with the field
named. Errors in a runtime file name that file and its line.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, ValidationError

from trainfleet.spec.documents import parse_document, read_job_text
from trainfleet.spec.errors import (
    Path,
    Problem,
    SourceMap,
    SpecError,
    brief,
    spec_error_from_validation,
)
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.kubeflow import (
    Container,
    EnvVar,
    Metadata,
    PodFields,
    PodTemplate,
    ResourceRequirements,
    _K8s,
    _nproc,
)
from trainfleet.spec.limits import JobLimits
from trainfleet.spec.models import JobSpec, RestartPolicy

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
STEP_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "node"
"""The replicated job (and its container) that runs the trainer, by Kubeflow's convention."""
RUNTIME: Hashable = "<runtime>"
"""First item of an origin path that lies in the runtime's file, not the TrainJob's."""
FRAMEWORKS = {"torch": Framework.PYTORCH, "jax": Framework.JAX, "xgboost": Framework.XGBOOST}


class JobTemplateSpec(_K8s):
    template: PodTemplate


class JobTemplate(_K8s):
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: JobTemplateSpec


class ReplicatedJob(_K8s):
    name: str
    replicas: StrictInt = 1
    template: JobTemplate

    @property
    def step(self) -> str | None:
        labels = self.template.metadata.get("labels") or {}
        return labels.get(STEP_LABEL) if isinstance(labels, dict) else None


class FailurePolicy(_K8s):
    maxRestarts: Annotated[StrictInt, Field(ge=0)] | None = None


class JobSetSpec(_K8s):
    replicatedJobs: Annotated[list[ReplicatedJob], Field(min_length=1)]
    failurePolicy: FailurePolicy = Field(default_factory=FailurePolicy)


class JobSetTemplate(_K8s):
    spec: JobSetSpec


class MLPolicy(_K8s):
    numNodes: Annotated[StrictInt, Field(ge=1)] | None = None
    torch: dict[str, Any] | None = None
    jax: dict[str, Any] | None = None
    xgboost: dict[str, Any] | None = None
    mpi: dict[str, Any] | None = None
    flux: dict[str, Any] | None = None


class RuntimeSpec(_K8s):
    mlPolicy: MLPolicy = Field(default_factory=MLPolicy)
    template: JobSetTemplate


class TrainingRuntime(_K8s):
    """A ClusterTrainingRuntime or TrainingRuntime: the part trainfleet reads."""

    apiVersion: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"]
    metadata: Metadata
    spec: RuntimeSpec


class RuntimeRef(_K8s):
    name: str
    apiGroup: Literal["trainer.kubeflow.org"] = "trainer.kubeflow.org"
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = "ClusterTrainingRuntime"


class Trainer(_K8s):
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    env: list[EnvVar] = Field(default_factory=list)
    numNodes: Annotated[StrictInt, Field(ge=1)] | None = None
    numProcPerNode: Annotated[StrictInt, Field(ge=1)] | str | None = None
    resourcesPerNode: ResourceRequirements | None = None


class TrainJobSpec(_K8s):
    runtimeRef: RuntimeRef
    trainer: Trainer = Field(default_factory=Trainer)
    initializer: dict[str, Any] | None = None
    activeDeadlineSeconds: Annotated[StrictInt, Field(ge=1)] | None = None
    suspend: bool = False
    runtimePatches: list[Any] | None = None


class TrainJob(_K8s):
    """The part of a TrainJob manifest that trainfleet reads."""

    apiVersion: str
    kind: Literal["TrainJob"]
    metadata: Metadata
    spec: TrainJobSpec


@dataclass(frozen=True)
class LoadedRuntime:
    """A training runtime and where it was read (for errors about its fields)."""

    runtime: TrainingRuntime
    source: SourceMap


class RuntimeCatalog:
    """The training runtimes a TrainJob may name, by kind and name: the built-in
    ClusterTrainingRuntimes, then runtime files (which replace a built-in of their name)."""

    def __init__(self, runtimes: Iterable[LoadedRuntime] = ()) -> None:
        self._by_ref: dict[tuple[str, str], LoadedRuntime] = {}
        for loaded in runtimes:
            meta = loaded.runtime
            self._by_ref[(meta.kind, meta.metadata.name)] = loaded

    @classmethod
    def with_files(cls, paths: Iterable[str]) -> RuntimeCatalog:
        """The built-in runtimes and those of ``paths``; SpecError naming a bad file."""
        return cls([*builtin_runtimes(), *(load_runtime_file(path) for path in paths)])

    @classmethod
    def builtin(cls) -> RuntimeCatalog:
        """Kubeflow's built-in runtimes alone."""
        return cls(builtin_runtimes())

    def adding(self, runtimes: Iterable[LoadedRuntime]) -> RuntimeCatalog:
        """These runtimes and ``runtimes``, which replace those of their kind and name."""
        return RuntimeCatalog([*self._by_ref.values(), *runtimes])

    def find(self, ref: RuntimeRef) -> LoadedRuntime | None:
        return self._by_ref.get((ref.kind, ref.name))

    def names(self, kind: str) -> list[str]:
        return sorted(name for found, name in self._by_ref if found == kind)


@functools.cache
def builtin_runtimes() -> tuple[LoadedRuntime, ...]:
    """Kubeflow's built-in ClusterTrainingRuntimes, as shipped in ``kubeflow_runtimes/``."""
    folder = resources.files("trainfleet.spec") / "kubeflow_runtimes"
    return tuple(
        _runtime(entry.read_text(encoding="utf-8"), f"<built-in runtime {entry.name}>")
        for entry in sorted(folder.iterdir(), key=lambda entry: entry.name)
        if entry.name.endswith(".yaml")
    )


def load_runtime_file(path: str) -> LoadedRuntime:
    """The training runtime in the file at ``path``; SpecError naming the file and line."""
    return _runtime(read_job_text(path), path)


def _runtime(text: str, filename: str) -> LoadedRuntime:
    return loaded_runtime(*parse_document(text, filename))


def loaded_runtime(data: Mapping[Hashable, Any], source: SourceMap) -> LoadedRuntime:
    """The training runtime of a document; SpecError naming its fields' lines."""
    kind = data.get("kind")
    if kind not in RUNTIME_KINDS:
        expected = " or ".join(RUNTIME_KINDS)
        raise SpecError([source.problem(("kind",), f"{brief(kind)} is not a {expected}")])
    try:
        return LoadedRuntime(TrainingRuntime.model_validate(data), source)
    except ValidationError as error:
        raise spec_error_from_validation(error, data, source, model=TrainingRuntime) from None


@dataclass(frozen=True)
class _TwoFiles(SourceMap):
    """The TrainJob's source map, which sends paths under RUNTIME to the runtime's."""

    runtime: SourceMap = field(default_factory=SourceMap)

    def problem(self, path: Path, message: str) -> Problem:
        if path[:1] == (RUNTIME,):
            return self.runtime.problem(path[1:], message)
        return super().problem(path, message)


def job_from_trainjob(
    data: Mapping[Hashable, Any],
    source: SourceMap,
    limits: JobLimits,
    runtimes: RuntimeCatalog | None = None,
) -> tuple[JobSpec, list[str]]:
    """The JobSpec of a TrainJob manifest, and warnings about what is ignored locally."""
    api = data.get("apiVersion")
    if api != API_VERSION:
        what = "is required" if api is None else f"unsupported apiVersion {brief(api)}"
        message = f"{what}: trainfleet reads TrainJob {API_VERSION}"
        raise SpecError([source.problem(("apiVersion",), message)])
    try:
        manifest = TrainJob.model_validate(data)
    except ValidationError as error:
        raise spec_error_from_validation(error, data, source, model=TrainJob) from None
    catalog = runtimes or RuntimeCatalog.builtin()
    ref = manifest.spec.runtimeRef
    loaded = catalog.find(ref)
    if loaded is None:
        known = ", ".join(catalog.names(ref.kind)) or "none"
        message = (
            f"no {ref.kind} named {ref.name!r} (known: {known}); give its file with --runtime FILE"
        )
        raise SpecError([source.problem(("spec", "runtimeRef", "name"), message)])
    both = _TwoFiles(source.file, source.lines, loaded.source)
    converter = _TrainJobConverter(manifest, loaded.runtime, both)
    return converter.job_spec(converter.job(), limits)


class _TrainJobConverter(PodFields):
    """Builds the JobSpec input from a TrainJob and its runtime."""

    def __init__(self, manifest: TrainJob, runtime: TrainingRuntime, source: SourceMap) -> None:
        super().__init__(source)
        self.manifest = manifest
        self.runtime = runtime

    def job(self) -> dict[str, Any]:
        meta, spec = self.manifest.metadata, self.manifest.spec
        framework = self._framework()
        job: dict[str, Any] = {"name": meta.name, "framework": framework}
        self.origin |= {("name",): ("metadata", "name"), ("framework",): self._ref_path}
        self._refuse_unsupported()
        role = self._trainer_role(framework)
        job["roles"] = {"worker": role} if role is not None else {}
        self.origin[("roles",)] = self._ref_path
        labels = dict(meta.labels)
        if QUEUE_LABEL in labels:  # Kueue's queue is trainfleet's
            job["queue"] = labels.pop(QUEUE_LABEL)
            self.origin[("queue",)] = ("metadata", "labels", QUEUE_LABEL)
        job["labels"] = labels
        self.origin[("labels",)] = ("metadata", "labels")
        for key in labels:
            self.origin[("labels", key)] = ("metadata", "labels", key)
        if spec.activeDeadlineSeconds is not None:
            job["deadline"] = spec.activeDeadlineSeconds
            self.origin[("deadline",)] = ("spec", "activeDeadlineSeconds")
        job["restart"] = self._restart()
        nproc = spec.trainer.numProcPerNode
        if nproc is not None:
            path: Path = ("spec", "trainer", "numProcPerNode")
            if framework is Framework.PYTORCH:
                job["pytorch"] = {"nproc_per_node": _nproc(nproc)}
                self.origin[("pytorch", "nproc_per_node")] = path
            elif nproc != 1:
                self._problem(path, f"is for torch runtimes: {framework.value} runs one per node")
        if spec.suspend:
            self.warnings.append("spec.suspend: trainfleet starts the job now (no suspend)")
        return job

    @property
    def _ref_path(self) -> Path:
        return ("spec", "runtimeRef", "name")

    def _framework(self) -> Framework:
        policy = self.runtime.spec.mlPolicy
        kinds = ("torch", "jax", "xgboost", "mpi", "flux")
        given = [name for name in kinds if getattr(policy, name) is not None]
        for name in given:
            if name in FRAMEWORKS:
                return FRAMEWORKS[name]
        if given:
            self._problem(
                (RUNTIME, "spec", "mlPolicy", given[0]),
                f"{given[0]} runtimes are not supported here (torch, jax, xgboost are)",
            )
        return Framework.GENERIC

    def _refuse_unsupported(self) -> None:
        spec = self.manifest.spec
        if spec.initializer:
            self._problem(
                ("spec", "initializer"),
                "dataset and model initializers are not supported: fetch the data in the "
                "trainer's command, or mount it (volumes of the runtime)",
            )
        if spec.runtimePatches:
            self._problem(
                ("spec", "runtimePatches"),
                "are not supported: write the changed runtime to a file and give it with "
                "--runtime FILE",
            )

    def _trainer_role(self, framework: Framework) -> dict[str, Any] | None:
        """The role of the runtime's trainer step, with the TrainJob's trainer applied."""
        jobs = self.runtime.spec.template.spec.replicatedJobs
        base: Path = (RUNTIME, "spec", "template", "spec", "replicatedJobs")
        index = next((i for i, job in enumerate(jobs) if job.step == "trainer"), None)
        if index is None:
            index = next((i for i, job in enumerate(jobs) if job.name == TRAINER_STEP), None)
        if index is None:
            names = ", ".join(job.name for job in jobs)
            message = f"has no trainer step (a job labelled {STEP_LABEL}: trainer; jobs: {names})"
            self._problem(base, message)
            return None
        for i, other in enumerate(jobs):
            if i != index:
                message = (
                    f"step {other.name!r}: trainfleet runs runtimes of one step (the trainer), "
                    "not initializers or launchers"
                )
                self._problem((*base, i, "name"), message)
        step = jobs[index]
        path: Path = (*base, index, "template", "spec", "template")
        pod = step.template.spec.template.spec
        slot = next((i for i, c in enumerate(pod.containers) if c.name == TRAINER_STEP), 0)
        trainer = self.manifest.spec.trainer
        merged = self._apply_trainer(pod.containers[slot], trainer)
        pod = pod.model_copy(update={"containers": [*pod.containers[:slot], merged]})
        target: Path = ("roles", "worker")
        self.origin[target] = (*base, index)
        cpath: Path = (*path, "spec", "containers", slot)
        role = self.container(pod, slot, target, cpath)
        self._trainer_origins(trainer, target)
        role["env"] = {**role["env"], **self._env(_env_only(trainer.env), _TRAINER, target)}
        nodes = trainer.numNodes or self.runtime.spec.mlPolicy.numNodes
        if nodes is not None:
            role["replicas"] = nodes
            given = trainer.numNodes is not None
            where = (*_TRAINER, "numNodes") if given else (RUNTIME, "spec", "mlPolicy", "numNodes")
            self.origin[(*target, "replicas")] = where
        return role

    @staticmethod
    def _apply_trainer(container: Container, trainer: Trainer) -> Container:
        update: dict[str, Any] = {}
        for name in ("image", "command", "args"):
            if getattr(trainer, name) is not None:
                update[name] = getattr(trainer, name)
        if trainer.resourcesPerNode is not None:
            update["resources"] = trainer.resourcesPerNode
        return container.model_copy(update=update)

    def _trainer_origins(self, trainer: Trainer, target: Path) -> None:
        """Fields the TrainJob gave come from it, not from the runtime."""
        for name in ("image", "command", "args"):
            words = getattr(trainer, name)
            if words is None:
                continue
            self.origin[(*target, name)] = (*_TRAINER, name)
            if isinstance(words, list):
                for i in range(len(words)):
                    self.origin[(*target, name, i)] = (*_TRAINER, name, i)
        if trainer.resourcesPerNode is not None:
            for key in list(self.origin):
                if key[: len(target) + 1] == (*target, "resources"):
                    self.origin[key] = (*_TRAINER, "resourcesPerNode")

    def _restart(self) -> dict[str, Any]:
        retries = self.runtime.spec.template.spec.failurePolicy.maxRestarts
        if not retries:
            return {"policy": RestartPolicy.NEVER}
        path = (RUNTIME, "spec", "template", "spec", "failurePolicy", "maxRestarts")
        self.origin[("restart", "max_restarts")] = path
        return {"policy": RestartPolicy.ON_FAILURE, "max_restarts": retries, "scope": "job"}


_TRAINER: Path = ("spec", "trainer")


def _env_only(env: list[EnvVar]) -> Container:
    return Container(env=env)
