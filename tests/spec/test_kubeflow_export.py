"""`trainfleet export --to kubeflow`: every export is valid against the training operator's
own CRD schema (``tests/data/kubeflow``), reads back as the same job, and a job Kubernetes
cannot run is refused naming each field."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import example_job_files, trainfleet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainfleet.spec.errors import SpecError
from trainfleet.spec.kubeflow import KINDS, job_from_manifest
from trainfleet.spec.kubeflow_export import manifest_of
from trainfleet.spec.loading import load_job_file, load_job_text
from trainfleet.spec.models import JobSpec, RestartPolicy

CRDS = Path(__file__).resolve().parents[1] / "data" / "kubeflow" / "crds-v1"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@functools.cache
def validator_of(kind: str) -> jsonschema.Draft7Validator:
    """A validator of the openAPIV3Schema of ``kind``'s served version, from its CRD."""
    plural = f"{kind.lower()}s"
    crd = yaml.load((CRDS / f"kubeflow.org_{plural}.yaml").read_text(), Loader=yaml.CSafeLoader)
    (version,) = [v for v in crd["spec"]["versions"] if v["served"]]
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])


def validate(manifest: dict[str, Any]) -> None:
    """Raise jsonschema's error for a manifest the operator's API server would refuse."""
    validator_of(manifest["kind"]).validate(manifest)


def test_the_schemas_refuse_what_the_operator_refuses() -> None:
    """The check itself can fail: a replica count as text is refused."""
    manifest, _ = manifest_of(load_job_file(EXAMPLES / "torch_ddp" / "pytorchjob.yaml").spec)
    validate(manifest)
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "2"
    with pytest.raises(jsonschema.ValidationError, match="'2' is not of type 'integer'"):
        validate(manifest)


@pytest.mark.parametrize(
    "path", example_job_files(), ids=lambda path: f"{path.parent.name}/{path.name}"
)
def test_every_example_exports_or_is_refused_naming_why(path: Path) -> None:
    """Examples with an image export to a manifest the operator takes, which reads back
    as the same job; the others are refused, each reason naming a field."""
    spec = load_job_file(path).spec
    try:
        manifest, _ = manifest_of(spec)
    except SpecError as error:
        assert error.problems and all(problem.field for problem in error.problems)
        assert any(spec.image_of(role) is None for role in spec.roles), error
        return
    validate(manifest)
    assert same_job(job_from_manifest(manifest)[0], spec)


def test_what_kubernetes_cannot_run_is_refused_field_by_field() -> None:
    spec = load_job_text(
        "name: odd\nframework: tensorflow\nenvironment: {pip: [numpy]}\nroles:\n"
        "  worker: {command: python t.py, resources: {gpu: 0.5}}\n"
        "  client: {command: python c.py}\n"
    ).spec
    with pytest.raises(SpecError) as raised:
        manifest_of(spec, file="job.yaml")
    assert str(raised.value).splitlines() == [
        "job.yaml: environment: a per-job Python environment has no Kubeflow form: use an image",
        "job.yaml: roles.worker.image: is required: Kubernetes runs every task in a container",
        "job.yaml: roles.worker.resources.gpu: 0.5: Kubernetes gives whole GPUs only",
        "job.yaml: roles.client: a TFJob has no replica type for it "
        "(roles: chief, master, worker, ps, evaluator)",
    ]


def test_the_cli_prints_the_manifest_and_what_it_leaves_out(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: ddp\nframework: pytorch\nimage: torch:2\npriority: 5\nroles:\n"
        "  master: {command: [torchrun, train.py], port: 29500}\n"
    )
    done = subprocess.run(trainfleet("export", job), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    validate(yaml.safe_load(done.stdout))
    assert done.stderr.splitlines() == [
        "warning: not exported: priority 5: Kubernetes orders pods by PriorityClass",
        "warning: not exported: roles.master.port: the operator gives each replica type its port",
        "warning: not exported: roles.master: the job's folder as working directory (a pod "
        "runs in the image's WORKDIR; give working_dir to choose one)",
    ]
    job.write_text("name: bare\nroles:\n  worker: {command: x}\n")
    refused = subprocess.run(trainfleet("export", job), capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"error: {job}: framework: 'generic' has no Kubeflow kind")


def same_job(imported: JobSpec, original: JobSpec) -> bool:
    """Equal but for how the same thing is written (a job's image or env given per role,
    the job's restart policy given per role)."""
    return _normal(imported) == _normal(original)


def _normal(spec: JobSpec) -> dict[str, Any]:
    data = spec.model_dump(mode="json")
    for name, role in data["roles"].items():
        role["image"] = spec.image_of(name)
        role["env"] = {**spec.env, **spec.roles[name].env}
        role["restart_policy"] = spec.restart_policy_of(name).value
        # A pod runs in its image's WORKDIR: the job's folder as one is not exported (left_out).
        role["image_workdir"] = None
        role["command"] = (
            spec.roles[name].argv()[: len(spec.roles[name].argv()) - len(role["args"])] or None
        )
    # The restart's scope is not exported (left_out says so): the operator decides.
    data.update(image=None, env={}, restart={**data["restart"], "policy": "never", "scope": None})
    return data


WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./=", min_size=1, max_size=12)
NAMES = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@st.composite
def exportable_jobs(draw: st.DrawFn) -> JobSpec:
    """Jobs Kubernetes can run: images everywhere, whole GPUs, roles of their kind."""
    kind = draw(st.sampled_from(sorted(KINDS)))
    info = KINDS[kind]
    tracked = "Launcher" if kind == "MPIJob" else "Worker"  # a tracked one
    names = draw(st.sets(st.sampled_from(info.replica_types))) | {tracked}
    if {"Chief", "Master"} <= names:  # both would be the job's master
        names.remove("Master")
    roles = {}
    for type_name in sorted(names):
        role: dict[str, Any] = {
            "replicas": 1
            if type_name in ("Chief", "Master", "Launcher")
            else draw(st.integers(1, 4)),
            "image": draw(
                st.from_regex(r"[a-z][a-z0-9]{0,6}(/[a-z0-9]{1,6})?:[0-9]{1,2}", fullmatch=True)
            ),
            "args": draw(st.lists(WORDS, max_size=3)),
            "env": draw(
                st.dictionaries(
                    st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True), WORDS, max_size=2
                )
            ),
            "pull": draw(st.sampled_from(["if-missing", "always", "never"])),
            "restart_policy": draw(st.none() | st.sampled_from([p.value for p in RestartPolicy])),
            "resources": {
                "cpu": draw(st.none() | st.integers(1, 64_000)),
                "memory": draw(st.none() | st.integers(1, 2**40)),
                "gpu": 0 if kind == "MPIJob" else draw(st.integers(0, 8)),
            },
            "mounts": [
                {"source": f"/data/{s}", "target": f"/mnt/{t}", "read_only": ro}
                for s, t, ro in draw(st.lists(st.tuples(NAMES, NAMES, st.booleans()), max_size=2))
            ],
        }
        if draw(st.booleans()):
            role["command"] = draw(st.lists(WORDS, min_size=1, max_size=3))
        if draw(st.booleans()):
            role["working_dir"] = "/" + draw(NAMES)
        roles[type_name.lower()] = role
    job: dict[str, Any] = {
        "name": draw(NAMES),
        "framework": info.framework.value,
        "roles": roles,
        "restart": {
            "policy": draw(st.sampled_from([p.value for p in RestartPolicy])),
            "max_restarts": draw(st.integers(0, 9)),
        },
        "grace_period": draw(st.integers(0, 600)),
        "deadline": draw(st.none() | st.integers(1, 10**6)),
        "labels": draw(st.dictionaries(NAMES, NAMES, max_size=2)),
        "queue": draw(st.sampled_from(["default", "team-a"])),
    }
    if info.framework.value == "tensorflow" and "worker" in roles and draw(st.booleans()):
        job["success"] = "all-workers"
    if kind == "MPIJob" and draw(st.booleans()):
        job["mpi"] = {"slots_per_worker": draw(st.integers(1, 8))}
    return JobSpec.model_validate(job)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exportable_jobs())
def test_import_of_the_export_is_the_same_job(spec: JobSpec) -> None:
    manifest, _ = manifest_of(spec)
    validate(manifest)
    imported, warnings = job_from_manifest(manifest)
    assert warnings == []
    assert _normal(imported) == _normal(spec)
