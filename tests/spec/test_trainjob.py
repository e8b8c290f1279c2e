"""Kubeflow Trainer v2 TrainJobs: read as written on the built-in runtimes or on a runtime
file (``--runtime``), refused naming the field (in the job's or the runtime's file), and
exported back as a TrainJob the Trainer's own CRD schema takes."""

from __future__ import annotations

import functools
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import example_job_files, run_cli, trainfleet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trainfleet.spec as spec_package
from trainfleet.spec.errors import SpecError
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.loading import LoadedJob, load_job_file, load_job_text
from trainfleet.spec.models import JobSpec, RestartPolicy
from trainfleet.spec.trainjob import RuntimeCatalog, builtin_runtimes
from trainfleet.spec.trainjob_export import RUNTIME_OF, trainjob_of

CRD = Path(__file__).resolve().parents[1] / "data" / "kubeflow" / "trainer-v2"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TORCH_JOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: mnist
  labels:
    kueue.x-k8s.io/queue-name: team-a
spec:
  activeDeadlineSeconds: 600
  runtimeRef:
    name: torch-distributed
  trainer:
    numNodes: 3
    numProcPerNode: 2
    image: localhost/trainfleet/torch:2.13.0
    command: [torchrun, train.py]
    args: [--epochs, "5"]
    env:
      - name: EPOCHS
        value: "5"
    resourcesPerNode:
      limits:
        cpu: 2
        memory: 4Gi
"""

RUNTIME = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata:
  name: my-torch
spec:
  mlPolicy:
    numNodes: 2
    torch: {}
  template:
    spec:
      failurePolicy:
        maxRestarts: 2
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  volumes:
                    - name: data
                      hostPath: {path: /srv/data}
                  containers:
                    - name: node
                      image: localhost/trainfleet/python:3.11
                      command: [python, -c, "import os; print(os.environ['GREETING'])"]
                      workingDir: /tmp
                      env:
                        - name: GREETING
                          value: from the runtime
                        - name: KEPT
                          value: "yes"
                      volumeMounts:
                        - {name: data, mountPath: /data, readOnly: true}
"""


def on_runtime(name: str, kind: str = "TrainingRuntime", trainer: str = "{}") -> str:
    return textwrap.dedent(f"""\
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata:
          name: custom
        spec:
          runtimeRef:
            name: {name}
            kind: {kind}
          trainer: {trainer}
        """)


def catalog_of(tmp_path: Path, text: str = RUNTIME) -> RuntimeCatalog:
    path = tmp_path / "runtime.yaml"
    path.write_text(text)
    return RuntimeCatalog.with_files([str(path)])


def load(text: str, runtimes: RuntimeCatalog | None = None) -> LoadedJob:
    return load_job_text(text, "trainjob.yaml", runtimes=runtimes)


def problems_of(text: str, runtimes: RuntimeCatalog | None = None) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load(text, runtimes)
    return [str(problem) for problem in caught.value.problems]


def test_a_torch_trainjob_on_the_builtin_runtime() -> None:
    loaded = load(TORCH_JOB)
    spec = loaded.spec
    assert (loaded.source, loaded.warnings) == ("TrainJob", [])
    assert spec.framework is Framework.PYTORCH and list(spec.roles) == ["worker"]
    worker = spec.roles["worker"]
    assert worker.replicas == 3
    assert worker.image == "localhost/trainfleet/torch:2.13.0"
    assert (worker.command, worker.args) == (["torchrun", "train.py"], ["--epochs", "5"])
    assert worker.env == {"EPOCHS": "5"}
    assert (worker.resources.cpu, worker.resources.memory) == (2000, 4 * 2**30)
    assert spec.pytorch is not None and spec.pytorch.nproc_per_node == 2
    assert (spec.queue, spec.deadline) == ("team-a", 600)
    assert spec.restart.policy is RestartPolicy.NEVER


@pytest.mark.parametrize(
    ("runtime", "framework"),
    [
        ("torch-distributed", Framework.PYTORCH),
        ("jax-distributed", Framework.JAX),
        ("xgboost-distributed", Framework.XGBOOST),
    ],
)
def test_each_builtin_runtime_gives_its_framework_and_image(
    runtime: str, framework: Framework
) -> None:
    spec = load(on_runtime(runtime, "ClusterTrainingRuntime", "{numNodes: 2}")).spec
    assert spec.framework is framework
    assert spec.roles["worker"].replicas == 2
    assert spec.roles["worker"].image  # the runtime's own image, as Kubeflow ships it


def test_the_builtin_runtimes_are_kubeflows_files() -> None:
    """Shipped unchanged, license header included, and all four read."""
    names = {loaded.runtime.metadata.name for loaded in builtin_runtimes()}
    assert names == {f"{n}-distributed" for n in ("torch", "jax", "xgboost", "deepspeed")}
    for loaded in builtin_runtimes():
        assert loaded.source.file and loaded.source.file.startswith("<built-in runtime")
    folder = Path(spec_package.__file__).parent / "kubeflow_runtimes"
    assert len(list(folder.glob("*.yaml"))) == 4
    for path in folder.glob("*.yaml"):
        assert path.read_text().startswith("# Copyright The Kubeflow Authors.")


def test_a_runtime_file_gives_the_pod_and_the_trainjob_overrides_it(tmp_path: Path) -> None:
    runtimes = catalog_of(tmp_path)
    spec = load(on_runtime("my-torch"), runtimes).spec
    worker = spec.roles["worker"]
    assert worker.replicas == 2  # the runtime's mlPolicy.numNodes
    assert worker.image == "localhost/trainfleet/python:3.11"
    assert worker.env == {"GREETING": "from the runtime", "KEPT": "yes"}
    assert worker.working_dir == "/tmp"
    assert [(m.source, m.target, m.read_only) for m in worker.mounts] == [
        ("/srv/data", "/data", True)
    ]
    assert (spec.restart.policy, spec.restart.max_restarts) == (RestartPolicy.ON_FAILURE, 2)
    assert spec.restart.scope == "job"  # JobSet recreates every job

    trainer = (
        "{numNodes: 4, image: 'localhost/trainfleet/torch:2.13.0', args: [--fast], "
        "env: [{name: GREETING, value: from the job}], resourcesPerNode: {requests: {cpu: 1}}}"
    )
    spec = load(on_runtime("my-torch", trainer=trainer), runtimes).spec
    worker = spec.roles["worker"]
    assert worker.replicas == 4
    assert worker.image == "localhost/trainfleet/torch:2.13.0"
    assert worker.command is not None and worker.command[0] == "python"  # the runtime's
    assert worker.args == ["--fast"]
    assert worker.env == {"GREETING": "from the job", "KEPT": "yes"}
    assert worker.resources.cpu == 1000


def test_a_trainjob_with_its_runtime_in_one_file_as_kubectl_takes_it(
    tmp_path: Path, data_dir: Path
) -> None:
    """One file of two documents (the runtime, then the TrainJob; an empty document
    between, as kubectl skips): the job is read on the file's runtime, with no --runtime."""
    both = RUNTIME + "---\n---\n" + on_runtime("my-torch")
    spec = load(both).spec
    assert spec.roles["worker"].env == {"GREETING": "from the runtime", "KEPT": "yes"}
    (tmp_path / "job.yaml").write_text(both)
    shown = run_cli("run", "--dry-run", tmp_path / "job.yaml")
    assert shown.returncode == 0, shown.stderr
    assert "worker/1" in shown.stdout and "GREETING=from the runtime" in shown.stdout


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        (
            [on_runtime("my-torch"), on_runtime("my-torch")],
            "trainjob.yaml:11: the file holds 2 jobs (TrainJob on line 1, TrainJob on line 11)",
        ),
        (
            [on_runtime("my-torch"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"],
            "the file holds 2 jobs (TrainJob on line 1, ConfigMap on line 11)",
        ),
        ([RUNTIME, RUNTIME], "trainjob.yaml: the file holds training runtimes and no job"),
        # A runtime of the file is checked as a runtime file is, naming its line.
        (
            [RUNTIME.replace("numNodes: 2", "numNodes: zero"), on_runtime("my-torch")],
            "trainjob.yaml:7: spec.mlPolicy.numNodes: expected an integer",
        ),
    ],
)
def test_a_file_of_several_documents_holds_one_job(documents: list[str], expected: str) -> None:
    with pytest.raises(SpecError) as caught:
        load("---\n".join(documents))
    assert expected in str(caught.value), str(caught.value)


def test_a_runtime_file_replaces_the_builtin_of_its_name(tmp_path: Path) -> None:
    mine = RUNTIME.replace("TrainingRuntime", "ClusterTrainingRuntime").replace(
        "name: my-torch", "name: torch-distributed"
    )
    spec = load(
        on_runtime("torch-distributed", "ClusterTrainingRuntime"), catalog_of(tmp_path, mine)
    )
    assert spec.spec.roles["worker"].image == "localhost/trainfleet/python:3.11"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            on_runtime("torch-distribute", "ClusterTrainingRuntime"),
            "trainjob.yaml:7: spec.runtimeRef.name: no ClusterTrainingRuntime named "
            "'torch-distribute' (known: deepspeed-distributed, jax-distributed, "
            "torch-distributed, xgboost-distributed); give its file with --runtime FILE",
        ),
        (
            on_runtime("my-torch"),
            "trainjob.yaml:7: spec.runtimeRef.name: no TrainingRuntime named 'my-torch' "
            "(known: none); give its file with --runtime FILE",
        ),
        (
            on_runtime("torch-distributed", "ClusterTrainingRuntime", "{numNodes: 0}"),
            "trainjob.yaml:9: spec.trainer.numNodes: must be at least 1, got 0",
        ),
        (
            on_runtime("torch-distributed", "Runtime"),
            "trainjob.yaml:8: spec.runtimeRef.kind: expected 'ClusterTrainingRuntime' or "
            "'TrainingRuntime', got 'Runtime'",
        ),
        (
            TORCH_JOB.replace("v1alpha1", "v1", 1),
            "trainjob.yaml:1: apiVersion: unsupported apiVersion 'trainer.kubeflow.org/v1': "
            "trainfleet reads TrainJob trainer.kubeflow.org/v1alpha1",
        ),
        (
            TORCH_JOB + "  initializer:\n    dataset: {storageUri: 'hf://x'}\n",
            "trainjob.yaml:24: spec.initializer: dataset and model initializers are not "
            "supported: fetch the data in the trainer's command, or mount it (volumes of the "
            "runtime)",
        ),
        (
            TORCH_JOB + "  runtimePatches: [{manager: me}]\n",
            "trainjob.yaml:24: spec.runtimePatches: are not supported: write the changed "
            "runtime to a file and give it with --runtime FILE",
        ),
        (
            on_runtime("deepspeed-distributed", "ClusterTrainingRuntime"),
            "<built-in runtime deepspeed_distributed.yaml>:24: spec.mlPolicy.mpi: mpi runtimes "
            "are not supported here (torch, jax, xgboost are)",
        ),
        (
            TORCH_JOB.replace("numProcPerNode: 2", 'numProcPerNode: "2x"'),
            "trainjob.yaml:13: spec.trainer.numProcPerNode: expected an integer, or 'auto', "
            "'gpu' or 'cpu', got '2x'",
        ),
    ],
)
def test_bad_trainjobs_are_refused_naming_the_field(text: str, expected: str) -> None:
    problems = problems_of(text)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_errors_in_a_runtime_file_name_that_file_and_line(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(RUNTIME.replace("maxRestarts: 2", "maxRestarts: -1"))
    with pytest.raises(SpecError) as caught:
        RuntimeCatalog.with_files([str(runtime)])
    assert str(caught.value.problems[0]).startswith(
        f"{runtime}:12: spec.template.spec.failurePolicy.maxRestarts: must be at least 0"
    )
    bad_env = RUNTIME.replace("value: from the runtime", "valueFrom: {secretKeyRef: {}}")
    problems = problems_of(on_runtime("my-torch"), catalog_of(tmp_path, bad_env))
    assert problems[0].startswith(
        f"{tmp_path / 'runtime.yaml'}:32: spec.template.spec.replicatedJobs[0].template.spec."
        "template.spec.containers[0].env[0].valueFrom: only a secretKeyRef with a name and a "
        "key is read"
    ), problems
    # A value the runtime gives that the job model refuses points into the runtime too.
    bad_image = RUNTIME.replace("image: localhost/trainfleet/python:3.11", "image: 'a b'")
    problems = problems_of(on_runtime("my-torch"), catalog_of(tmp_path, bad_image))
    assert problems[0].startswith(f"{tmp_path / 'runtime.yaml'}:27: "), problems
    assert ".containers[0].image: " in problems[0]
    not_a_runtime = tmp_path / "job.yaml"
    not_a_runtime.write_text(TORCH_JOB)
    with pytest.raises(SpecError, match="'TrainJob' is not a ClusterTrainingRuntime or"):
        RuntimeCatalog.with_files([str(not_a_runtime)])


def test_the_cli_runs_a_trainjob_on_a_runtime_file(tmp_path: Path, data_dir: Path) -> None:
    """``--runtime`` reaches run (dry run here), export, and refuses a missing file (in a
    data directory of its own: a dry run opens the store)."""
    (tmp_path / "runtime.yaml").write_text(RUNTIME)
    (tmp_path / "job.yaml").write_text(on_runtime("my-torch"))
    shown = run_cli(
        "run", "--dry-run", "--runtime", tmp_path / "runtime.yaml", tmp_path / "job.yaml"
    )
    assert shown.returncode == 0, shown.stderr
    assert "worker/1" in shown.stdout and "GREETING=from the runtime" in shown.stdout
    missing = run_cli("run", "--dry-run", tmp_path / "job.yaml")
    assert missing.returncode == 2
    assert "no TrainingRuntime named 'my-torch'" in missing.stderr
    gone = run_cli("export", "--runtime", tmp_path / "nope.yaml", tmp_path / "job.yaml")
    assert (gone.returncode, gone.stderr) == (2, f"error: {tmp_path / 'nope.yaml'}: no such file\n")


@functools.cache
def trainjob_validator() -> jsonschema.Draft7Validator:
    crd = yaml.load(
        (CRD / "trainer.kubeflow.org_trainjobs.yaml").read_text(), Loader=yaml.CSafeLoader
    )
    (version,) = [v for v in crd["spec"]["versions"] if v["served"]]
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])


def test_the_example_exports_to_a_trainjob_the_crd_takes() -> None:
    """``--to trainjob`` of the PyTorchJob example; the check itself can fail."""
    spec = load_job_file(EXAMPLES / "torch_ddp" / "pytorchjob.yaml").spec
    with pytest.raises(SpecError, match=r"roles\.master: a TrainJob runs one role, worker"):
        trainjob_of(spec)
    manifest, _ = trainjob_of(load_job_file(EXAMPLES / "torch_ddp" / "trainjob.yaml").spec)
    trainjob_validator().validate(manifest)
    assert manifest["spec"]["trainer"]["numNodes"] == 3
    manifest["spec"]["trainer"]["numNodes"] = "3"
    with pytest.raises(jsonschema.ValidationError, match="'3' is not of type 'integer'"):
        trainjob_validator().validate(manifest)


@pytest.mark.parametrize(
    "path", example_job_files(), ids=lambda path: f"{path.parent.name}/{path.name}"
)
def test_every_example_exports_to_a_trainjob_or_is_refused_naming_why(path: Path) -> None:
    """Examples a TrainJob can hold export to one the CRD takes, which reads back as the
    same job; the others are refused, each reason naming a field."""
    spec = load_job_file(path).spec
    try:
        manifest, _ = trainjob_of(spec)
    except SpecError as error:
        assert error.problems and all(problem.field for problem in error.problems)
        return
    trainjob_validator().validate(manifest)
    imported = load_job_text(yaml.safe_dump(manifest)).spec
    assert imported.roles["worker"] == spec.roles["worker"].model_copy(
        update={"image": spec.image_of("worker"), "env": {**spec.env, **spec.roles["worker"].env}}
    )


def test_export_refuses_what_a_trainjob_cannot_say(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: x\nframework: mxnet\nimage: img:1\nroles:\n"
        "  worker: {command: python t.py, working_dir: /w, mounts: [{source: /a, target: /b}]}\n"
        "  server: {command: python s.py}\n"
    )
    refused = run_cli("export", "--to", "trainjob", job)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"error: {job}: framework: 'mxnet' has no built-in training runtime (jax, pytorch, "
        "xgboost)",
        f"{job}: roles.server: a TrainJob runs one role, worker (node 0 is the master)",
        f"{job}: roles.worker.mounts: a TrainJob's trainer has no volumes: use a runtime file",
        f"{job}: roles.worker.working_dir: a TrainJob's trainer has no working directory",
    ]


WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./=", min_size=1, max_size=12)
NAMES = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)


@st.composite
def trainjob_shaped_jobs(draw: st.DrawFn) -> JobSpec:
    """Jobs a TrainJob can hold: one role, worker, in an image (and its WORKDIR, as a pod
    runs), on a built-in runtime."""
    framework = draw(st.sampled_from(sorted(RUNTIME_OF, key=str)))
    worker: dict[str, Any] = {
        "replicas": draw(st.integers(1, 8)),
        "image_workdir": True,
        "image": draw(
            st.from_regex(r"[a-z][a-z0-9]{0,6}(/[a-z0-9]{1,6})?:[0-9]{1,2}", fullmatch=True)
        ),
        "args": draw(st.lists(WORDS, max_size=3)),
        "env": draw(
            st.dictionaries(
                st.from_regex(r"[A-Z][A-Z0-9_]{0,6}", fullmatch=True), WORDS, max_size=2
            )
        ),
        "resources": {
            "cpu": draw(st.none() | st.integers(1, 64_000)),
            "memory": draw(st.none() | st.integers(1, 2**40)),
            "gpu": draw(st.integers(0, 8)),
        },
    }
    if draw(st.booleans()):
        worker["command"] = draw(st.lists(WORDS, min_size=1, max_size=3))
    job: dict[str, Any] = {
        "name": draw(NAMES),
        "framework": framework.value,
        "roles": {"worker": worker},
        "deadline": draw(st.none() | st.integers(1, 10**6)),
        "labels": draw(st.dictionaries(NAMES, NAMES, max_size=2)),
        "queue": draw(st.sampled_from(["default", "team-a"])),
    }
    if framework is Framework.PYTORCH and draw(st.booleans()):
        job["pytorch"] = {"nproc_per_node": draw(st.integers(2, 8))}
    return JobSpec.model_validate(job)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trainjob_shaped_jobs())
def test_import_of_the_trainjob_export_is_the_same_job(spec: JobSpec) -> None:
    manifest, left_out = trainjob_of(spec)
    trainjob_validator().validate(manifest)
    assert left_out == []
    imported = load_job_text(yaml.safe_dump(manifest)).spec
    assert imported.model_dump() == spec.model_dump()


def test_export_cli_prints_a_trainjob() -> None:
    shown = subprocess.run(
        trainfleet("export", "--to", "trainjob", EXAMPLES / "torch_ddp" / "trainjob.yaml"),
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert yaml.safe_load(shown.stdout)["spec"]["runtimeRef"] == {"name": "torch-distributed"}
