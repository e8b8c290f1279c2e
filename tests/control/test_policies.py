"""The job's rules: exit codes, which failures are retried, success and failure of a job."""

from __future__ import annotations

import pytest

from trainfleet.control.policies import (
    describe_exit,
    exit_code,
    job_outcome,
    retries_failure,
    success_tasks,
)
from trainfleet.domain.records import State
from trainfleet.spec.models import JobSpec, RestartPolicy


def _job(roles: dict[str, dict[str, object]], **extra: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "roles": roles, **extra})


def test_exit_codes_follow_the_shell() -> None:
    assert exit_code(0) == 0
    assert exit_code(3) == 3
    assert exit_code(-9) == 137
    assert describe_exit(137) == "exit code 137 (SIGKILL)"
    assert describe_exit(143) == "exit code 143 (SIGTERM)"
    assert describe_exit(1) == "exit code 1"
    assert describe_exit(200) == "exit code 200"


@pytest.mark.parametrize(
    ("policy", "code", "retried"),
    [
        (RestartPolicy.NEVER, 1, False),
        (RestartPolicy.NEVER, 137, False),
        (RestartPolicy.ON_FAILURE, 1, True),
        (RestartPolicy.ALWAYS, 2, True),
        (RestartPolicy.EXIT_CODE, 1, False),
        (RestartPolicy.EXIT_CODE, 127, False),
        (RestartPolicy.EXIT_CODE, 128, True),
        (RestartPolicy.EXIT_CODE, 137, True),
        (RestartPolicy.EXIT_CODE, 255, True),
    ],
)
def test_which_failures_are_retried(policy: RestartPolicy, code: int, retried: bool) -> None:
    assert retries_failure(policy, code) is retried


def test_default_success_is_the_chief_then_worker_zero_then_tracked_tasks() -> None:
    chief = _job({"chief": {"command": "c"}, "worker": {"replicas": 2, "command": "w"}})
    assert success_tasks(chief) == [("chief", 0)]
    workers = _job({"ps": {"command": "p"}, "worker": {"replicas": 3, "command": "w"}})
    assert success_tasks(workers) == [("worker", 0)]
    in_graph = _job(
        {
            "ps": {"command": "trainfleet tf-server"},
            "worker": {"replicas": 2, "command": "trainfleet tf-server"},
            "client": {"command": "python client.py"},
        }
    )
    assert success_tasks(in_graph) == [("client", 0)]


def test_all_workers_and_role_list_success() -> None:
    roles = {
        "master": {"command": "m"},
        "worker": {"replicas": 2, "command": "w"},
        "evaluator": {"command": "e"},
    }
    assert success_tasks(_job(roles, success="all-workers")) == [
        ("master", 0),
        ("worker", 0),
        ("worker", 1),
    ]
    assert success_tasks(_job(roles, success=["evaluator"])) == [("evaluator", 0)]


def test_outcome_of_a_job() -> None:
    job = _job(
        {
            "chief": {"command": "c"},
            "worker": {"replicas": 2, "command": "w"},
            "ps": {"command": "p"},
        }
    )
    running = {
        ("chief", 0): State.RUNNING,
        ("worker", 0): State.RUNNING,
        ("worker", 1): State.RUNNING,
        ("ps", 0): State.RUNNING,
    }
    assert job_outcome(job, running, {}) is None
    chief_done = running | {("chief", 0): State.SUCCEEDED}
    assert job_outcome(job, chief_done, {}) == (State.SUCCEEDED, "chief/0 succeeded")
    failed = running | {("ps", 0): State.FAILED}
    assert job_outcome(job, failed, {("ps", 0): "exited with exit code 1"}) == (
        State.FAILED,
        "ps/0 exited with exit code 1",
    )
    restarting = running | {("worker", 1): State.RESTARTING}
    assert job_outcome(job, restarting, {}) is None


def test_tracked_tasks_ending_without_success_fail_the_job() -> None:
    job = _job(
        {"worker": {"replicas": 2, "command": "w"}, "evaluator": {"command": "e"}},
        success=["evaluator"],
    )
    states = {
        ("worker", 0): State.SUCCEEDED,
        ("worker", 1): State.SUCCEEDED,
        ("evaluator", 0): State.CANCELLED,
    }
    outcome = job_outcome(job, states, {})
    assert outcome is not None and outcome[0] is State.FAILED


def test_a_role_named_for_success_is_waited_for_even_if_untracked() -> None:
    job = _job(
        {"worker": {"replicas": 2, "command": "w"}, "ps": {"command": "p"}},
        success=["worker", "ps"],
    )
    workers_done = {
        ("worker", 0): State.SUCCEEDED,
        ("worker", 1): State.SUCCEEDED,
        ("ps", 0): State.RUNNING,
    }
    assert job_outcome(job, workers_done, {}) is None
    all_done = workers_done | {("ps", 0): State.SUCCEEDED}
    assert job_outcome(job, all_done, {}) == (
        State.SUCCEEDED,
        "worker/0, worker/1, ps/0 succeeded",
    )
