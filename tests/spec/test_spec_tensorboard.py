"""``tensorboard:`` on a job: its service role, its defaults, its errors at the field, and
that the service never decides the job's end."""

from __future__ import annotations

from typing import Any

import pytest

from trainfleet.control.policies import job_outcome
from trainfleet.domain.records import State
from trainfleet.spec.errors import SpecError
from trainfleet.spec.loading import load_job_text
from trainfleet.spec.models import JobSpec
from trainfleet.spec.submarine import SubmarineArgs, from_submarine_args


def job(**more: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "roles": {"worker": {"command": "t"}}, **more})


def test_a_tensorboard_is_an_untracked_service_role_that_reads_back_the_same() -> None:
    spec = job(tensorboard=True, checkpoint_path="/ck", image="python:3.11")
    assert spec.tracked_roles() == ["worker"] and spec.service_roles() == {"tensorboard"}
    assert spec.roles["tensorboard"].argv() == ["trainfleet", "tensorboard-serve"]
    assert spec.image_of("tensorboard") is None and spec.image_of("worker") == "python:3.11"
    assert spec.tensorboard_logdir() == "/ck" and spec.tensorboard is not None
    assert spec.tensorboard.keep_after == 0
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec
    assert job().service_roles() == frozenset() and "tensorboard" not in job().roles


@pytest.mark.parametrize(
    ("value", "logdir", "seconds"),
    [
        ({}, "tensorboard", 0.0),
        ({"logdir": "runs", "keep_after": "10m"}, "runs", 600.0),
        ({"keep_after": "1h30m"}, "tensorboard", 5400.0),
        ({"keep_after": 45}, "tensorboard", 45.0),
    ],
)
def test_logdir_and_keep_after(value: dict[str, Any], logdir: str, seconds: float) -> None:
    spec = job(tensorboard=value)
    assert spec.tensorboard is not None
    assert (spec.tensorboard_logdir(), spec.tensorboard.keep_after) == (logdir, seconds)


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("tensorboard: {keep_after: soon}", "tensorboard.keep_after", "is not a duration"),
        ("tensorboard: {keep_after: 2d}", "tensorboard.keep_after", "is not a duration"),
        ("tensorboard: {keep_after: 25h}", "tensorboard.keep_after", "between 0 and 24h"),
        ("tensorboard: {logdir: ''}", "tensorboard.logdir", "must be a path"),
        ("tensorboard: {port: 6006}", "tensorboard.port", "allowed: logdir, keep_after"),
        ("tensorboard: 3", "tensorboard", "expected a mapping"),
    ],
)
def test_bad_values_are_named_at_their_field(text: str, field: str, words: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_job_text(f"name: j\nroles:\n  worker: {{command: t}}\n{text}\n", "job.yaml")
    assert f"job.yaml:4: {field}: " in str(raised.value) and words in str(raised.value)


def test_a_role_of_that_name_collides() -> None:
    text = (
        "name: j\nroles:\n  worker: {command: t}\n  tensorboard: {command: t}\ntensorboard: true\n"
    )
    with pytest.raises(SpecError, match="role 'tensorboard' of its own"):
        load_job_text(text, "job.yaml")
    assert (
        "tensorboard"
        in job(roles={"worker": {"command": "t"}, "tensorboard": {"command": "t"}}).roles
    )


def test_a_failed_tensorboard_never_fails_the_job() -> None:
    spec = job(tensorboard=True)
    running = {("worker", 0): State.RUNNING, ("tensorboard", 0): State.FAILED}
    assert job_outcome(spec, running, {}) is None
    done = {("worker", 0): State.SUCCEEDED, ("tensorboard", 0): State.FAILED}
    assert job_outcome(spec, done, {}) == (State.SUCCEEDED, "worker/0 succeeded")


def test_submarine_tensorboard_flag() -> None:
    args = SubmarineArgs(name="s", num_workers=1, worker_launch_cmd="t", checkpoint_path="/ck")
    assert from_submarine_args(args).spec.tensorboard is None
    flagged = from_submarine_args(SubmarineArgs(**{**args.__dict__, "tensorboard": True})).spec
    assert flagged.tensorboard_logdir() == "/ck" and "tensorboard" in flagged.roles
