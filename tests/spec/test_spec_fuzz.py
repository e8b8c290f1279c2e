"""Whatever text or structure comes in, loading ends in a LoadedJob or a SpecError, never else."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainfleet.spec.errors import SpecError
from trainfleet.spec.loading import LoadedJob, load_job_text
from trainfleet.spec.models import JobSpec
from trainfleet.spec.submarine import SubmarineArgs, from_submarine_args, parse_resource_list

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Field names of job files and Kubeflow manifests, so random structures reach deep code paths.
KEYS = [
    *JobSpec.model_fields, "worker", "ps", "chief", "master", "replicas", "command", "resources",
    "cpu", "memory", "gpu", "policy", "max_restarts", "nproc_per_node", "elastic", "min_replicas",
    "apiVersion", "kind", "metadata", "spec", "tfReplicaSpecs", "pytorchReplicaSpecs", "Worker",
    "PS", "Master", "template", "containers", "args", "value", "valueFrom", "limits", "requests",
    "nvidia.com/gpu", "runPolicy", "backoffLimit", "elasticPolicy", "nprocPerNode",
    "successPolicy", "restartPolicy", "workingDir", "image", "mpiReplicaSpecs", "Launcher",
    "slotsPerWorker", "mpiImplementation", "runLauncherAsWorker", "mainContainer", "mpi",
    "slots_per_worker", "launcher",
]  # fmt: skip
WORDS = [
    "tensorflow", "pytorch", "TFJob", "PyTorchJob", "JAXJob", "XGBoostJob", "MPIJob",
    "kubeflow.org/v1", "on-failure", "OnFailure", "AllWorkers", "auto", "2Gi", "8X", "500m",
    "trainfleet tf-server", "demo", "Demo", "", "mpi", "OpenMPI", "Intel", "/usr/sbin/sshd",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.sampled_from(WORDS)
    | st.text(max_size=12)
)
structures = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(KEYS) | st.text(max_size=6) | st.integers(), inner, max_size=5
        )
    ),
    max_leaves=40,
)
kubeflow_like = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from(["kubeflow.org/v1", "kubeflow.org/v2beta1", "v1"]),
        "kind": st.sampled_from(WORDS),
    },
    optional={"metadata": structures, "spec": structures},
)
fragments = st.lists(
    st.sampled_from(
        [
            "name: demo\n",
            "roles:\n",
            "  worker:\n",
            "    command: x\n",
            "    replicas: -1\n",
            "{",
            "}",
            "[",
            "]",
            ", ",
            ": ",
            "- ",
            "&a ",
            "*a",
            "*b",
            "<<: *a\n",
            "!!int ",
            "!!bool ",
            "!!timestamp ",
            "!!binary ",
            "!!set ",
            "!!python/tuple ",
            "? ",
            "---\n",
            "...\n",
            "\t",
            "  ",
            "\n",
            "#",
            "'",
            '"',
            "|\n",
            ">\n",
            "%YAML 1.1\n",
            "\x00",
            "\ufeff",
            "\x85",
            "apiVersion: kubeflow.org/v1\n",
            "kind: TFJob\n",
            "spec:\n",
            "  tfReplicaSpecs:\n",
            "    Worker:\n",
            "      template: {spec: {containers: [{command: [a]}]}}\n",
        ]
    )
    | st.text(max_size=5),
    max_size=30,
).map("".join)


def check(text: str) -> None:
    try:
        result = load_job_text(text, "fuzz.yaml")
    except SpecError as error:
        assert error.problems
        assert all(str(problem) for problem in error.problems)
        assert str(error).startswith("fuzz.yaml")
    else:
        assert isinstance(result, LoadedJob)


@FUZZ
@given(st.text())
def test_random_text(text: str) -> None:
    check(text)


@FUZZ
@given(fragments)
def test_yaml_like_text(text: str) -> None:
    check(text)


@FUZZ
@given(structures | kubeflow_like)
def test_random_structures_as_yaml_and_json(data: Any) -> None:
    check(yaml.safe_dump(data))
    try:
        text = json.dumps(data)
    except ValueError:  # integer keys mixed with strings still dump; only odd floats fail
        return
    check(text)


@FUZZ
@given(
    st.builds(
        SubmarineArgs,
        name=st.none() | st.sampled_from(WORDS) | st.text(max_size=8),
        framework=st.none() | st.sampled_from(WORDS),
        num_workers=st.none() | st.integers(-2, 3),
        worker_resources=st.none() | st.text(max_size=20) | st.just("memory=8G,vcores=2,gpu=1"),
        worker_launch_cmd=st.none() | st.text(max_size=8),
        num_ps=st.none() | st.integers(-1, 2),
        ps_launch_cmd=st.none() | st.text(max_size=8),
        env=st.lists(st.text(max_size=6)).map(tuple),
    )
)
def test_random_submarine_flags(args: SubmarineArgs) -> None:
    try:
        assert isinstance(from_submarine_args(args), LoadedJob)
    except SpecError as error:
        assert error.problems


@FUZZ
@given(st.text(max_size=30))
def test_random_resource_lists(text: str) -> None:
    try:
        parse_resource_list(text)
    except SpecError as error:
        assert all(problem.field == "resources" for problem in error.problems)
