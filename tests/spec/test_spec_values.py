"""Values no task could start with, and jobs too big to build, are refused when read.

Each was accepted before (issue 10, items 5 and 6) and failed only once the job ran, or
made the server build a million tasks.
"""

from __future__ import annotations

import json

import pytest

from trainfleet.spec.errors import SpecError
from trainfleet.spec.limits import JobLimits
from trainfleet.spec.loading import load_job_text
from trainfleet.spec.submarine import SubmarineArgs, from_submarine_args


def problem_of(text: str, **options: object) -> str:
    with pytest.raises(SpecError) as raised:
        load_job_text(text, "job.yaml", **options)  # type: ignore[arg-type]
    return str(raised.value)


def job(role: dict[str, object], **top: object) -> str:
    """A job as JSON (YAML cannot write a NUL byte plainly)."""
    return json.dumps({"name": "demo", "roles": {"worker": role}, **top})


NUL = "must not contain a NUL character"


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (job({"command": "echo a\0b"}), "roles.worker.command", NUL),
        (job({"command": ["echo", "a\0b"]}), "roles.worker.command[1]", NUL),
        (job({"command": "x", "working_dir": "/tmp\0x"}), "roles.worker.working_dir", NUL),
        (job({"command": "x", "env": {"A": "1\0"}}), "roles.worker.env.A", NUL),
        (job({"command": "x", "env": {"A\0B": "1"}}), "roles.worker.env", NUL),
        (job({"command": "x"}, env={"B": "\0"}), "env.B", NUL),
        (job({"command": "x", "env": {"": "1"}}), "roles.worker.env['']", "needs a name"),
        (
            job({"command": "x", "env": {"A=B": "1"}}),
            "roles.worker.env.A=B",
            "must not contain '='",
        ),
        (job({"command": [""]}), "roles.worker.command", "must not be empty"),
        (job({"command": [" ", "x"]}), "roles.worker.command", "must not be empty"),
        (job({"command": "x", "replicas": "2"}), "roles.worker.replicas", "expected an integer"),
        (job({"command": "x", "replicas": True}), "roles.worker.replicas", "expected an integer"),
        (job({"command": "x", "port": "8000"}), "roles.worker.port", "expected an integer"),
        (job({"command": "x", "tracked": "yes"}), "roles.worker.tracked", "true or false"),
        (job({"command": "x"}, deadline=True), "deadline", "expected a number, got true"),
        (job({"command": "x"}, priority="1"), "priority", "expected an integer"),
        (
            job({"command": "x", "resources": {"memory": 0.05}}),
            "roles.worker.resources.memory",
            "memory 0.05 is not a whole number of bytes",
        ),
        (job({"command": "x"}, checkpoint={"keep": 0}), "checkpoint.keep", "at least 1"),
        (job({"command": "x"}, progress={"timeout": -5}), "progress.timeout", "greater than 0"),
        (job({"command": "x"}, progress={}), "progress.timeout", "required"),
        (
            job({"command": "x"}, restart={"requeue_exit_code": 0}),
            "restart.requeue_exit_code",
            "at least 1",
        ),
        (
            job({"command": "x"}, restart={"max_infrastructure": -1}),
            "restart.max_infrastructure",
            "at least 0",
        ),
    ],
)
def test_values_no_task_can_start_with_are_refused(text: str, field: str, message: str) -> None:
    problem = problem_of(text)
    assert f"job.yaml:1: {field}" in problem and message in problem


def test_yaml_reads_the_same_holes_with_their_lines() -> None:
    text = 'name: demo\nroles:\n  worker:\n    command: x\n    replicas: "2"\n'
    assert problem_of(text).startswith("job.yaml:5: roles.worker.replicas: expected an integer")


def test_a_job_declared_json_must_be_json() -> None:
    text = '{"name": "demo", "roles": {"worker": {"command": "x"}},}\n'
    assert load_job_text(text).spec.name == "demo"  # YAML forgives the trailing comma
    problem = problem_of(text, json_only=True)
    assert problem.startswith("job.yaml:1: invalid JSON: Expecting property name")
    assert problem_of("# a comment\n{}", json_only=True).startswith("job.yaml:1: invalid JSON")
    assert "NaN is not JSON" in problem_of('{"name": NaN}', json_only=True)
    duplicate = '{"name": "a",\n "name": "b", "roles": {"w": {"command": "x"}}}'
    assert "key 'name' appears twice" in problem_of(duplicate, json_only=True)
    assert load_job_text(job({"command": "x"}), json_only=True).spec.name == "demo"


def test_roles_and_tasks_are_limited_before_anything_is_built() -> None:
    roles = {f"r{i}": {"replicas": 10_000, "command": "x"} for i in range(100)}
    text = json.dumps({"name": "huge", "roles": roles})
    assert problem_of(text) == (
        "job.yaml:1: roles: the job has 100 roles, more than the limit of 64 per job"
    )
    two = (
        "name: big\nroles:\n  ps: {replicas: 2, command: x}\n"
        "  worker:\n    replicas: 999\n    command: x\n"
    )
    assert problem_of(two) == (
        "job.yaml:5: roles.worker.replicas: the job has 1001 tasks, more than the limit of "
        "1000 per job (this role has 999)"
    )
    assert problem_of(two, limits=JobLimits(roles=1)).startswith("job.yaml:2: roles: the job has 2")
    assert len(load_job_text(two, limits=JobLimits(tasks=1001)).spec.roles) == 2
    small = JobLimits(roles=64, tasks=10)
    assert "more than the limit of 10 per job" in problem_of(
        job({"command": "x", "replicas": 11}), limits=small
    )


def test_kubeflow_manifests_have_the_same_holes_closed() -> None:
    def manifest(replicas: object, container: dict[str, object]) -> str:
        return json.dumps(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "metadata": {"name": "demo"},
                "spec": {
                    "tfReplicaSpecs": {
                        "Worker": {
                            "replicas": replicas,
                            "template": {"spec": {"containers": [container]}},
                        }
                    }
                },
            }
        )

    ok = {"name": "tensorflow", "command": ["python", "train.py"]}
    assert "expected an integer" in problem_of(manifest("2", ok))
    assert "spec.tfReplicaSpecs.Worker.replicas" in problem_of(manifest(True, ok))
    nul = {"name": "tensorflow", "command": ["python\0", "train.py"]}
    assert NUL in problem_of(manifest(1, nul))
    bad_env = {**ok, "env": [{"name": "A=B", "value": "1"}]}
    assert "must not contain '='" in problem_of(manifest(1, bad_env))
    assert problem_of(manifest(5000, ok)) == (
        "job.yaml:1: spec.tfReplicaSpecs.Worker.replicas: the job has 5000 tasks, more than "
        "the limit of 1000 per job"
    )


def test_submarine_flags_are_held_to_the_same_limits() -> None:
    args = SubmarineArgs(name="big", num_workers=2000, worker_launch_cmd="python train.py")
    with pytest.raises(SpecError) as raised:
        from_submarine_args(args)
    assert str(raised.value) == (
        "--num_workers: the job has 2000 tasks, more than the limit of 1000 per job"
    )


def test_thousands_of_wrong_keys_make_a_report_of_bounded_size() -> None:
    keys = "".join(f"    key_{i}: 1\n" for i in range(5000))
    problem = problem_of(f"name: demo\nroles:\n  worker:\n    command: x\n{keys}")
    lines = problem.splitlines()
    assert len(lines) == 101 and lines[-1] == "job.yaml: and 4900 more"
