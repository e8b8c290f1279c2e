"""Images in a job file: what a role with an image may leave out or add, and what is
refused with the field named."""

from __future__ import annotations

import pytest

from trainfleet.spec.errors import SpecError
from trainfleet.spec.loading import load_job_text


def problem_of(text: str) -> str:
    with pytest.raises(SpecError) as raised:
        load_job_text(text, "job.yaml")
    return str(raised.value)


def test_the_job_image_is_every_role_s_that_names_none() -> None:
    spec = load_job_text(
        "name: boxed\nimage: base:1\nroles:\n"
        "  worker: {args: [--lr, '0.1']}\n"
        "  ps: {image: ps:2, command: [serve]}\n"
    ).spec
    assert spec.image_of("worker") == "base:1" and spec.image_of("ps") == "ps:2"
    worker = spec.roles["worker"]
    assert worker.command is None and worker.argv() == ["--lr", "0.1"]  # to the ENTRYPOINT
    assert spec.roles["ps"].argv() == ["serve"]


def test_args_follow_the_command() -> None:
    roles = load_job_text(
        "name: a\nroles:\n"
        "  listed: {command: [python, t.py], args: [--x, '1']}\n"
        "  plain: {command: python t.py, args: [--x]}\n"
        "  shell: {command: 'echo $0 $1 > out', args: [a b]}\n"
    ).spec.roles
    assert roles["listed"].argv() == ["python", "t.py", "--x", "1"]
    assert roles["plain"].argv() == ["python", "t.py", "--x"]
    assert roles["shell"].argv() == ["/bin/sh", "-c", "echo $0 $1 > out", "sh", "a b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("roles:\n  worker: {args: [a]}\n", "job.yaml:3: roles.worker.command: is required"),
        (
            "roles:\n  worker: {command: x, mounts: [{source: d, target: /d}]}\n",
            "job.yaml:3: roles.worker: mounts: only a role with an image has mounts",
        ),
        (
            "roles:\n  worker: {image: i, command: x, environment: {pip: [numpy]}}\n",
            "job.yaml:3: roles.worker: environment: a role with an image runs that image's Python",
        ),
        (
            "image: i\nenvironment: {pip: [numpy]}\nroles:\n  worker: {command: x}\n",
            "environment: role(s) worker run in an image, which has its own Python",
        ),
        (
            "roles:\n  worker: {image: --privileged, command: x}\n",
            "job.yaml:3: roles.worker.image: '--privileged' is not an image reference",
        ),
        (
            "roles:\n  worker: {image: i, command: x, mounts: [{source: 'a:b', target: /d}]}\n",
            "roles.worker.mounts[0].source: source 'a:b' must be a path without ':' or ','",
        ),
        (
            "roles:\n  worker: {image: i, command: x, mounts: [{source: a, target: d}]}\n",
            "roles.worker.mounts[0].target: target 'd' must be an absolute path",
        ),
        (
            "roles:\n  worker: {image: i, command: x, pull: sometimes}\n",
            "job.yaml:3: roles.worker.pull: ",
        ),
    ],
)
def test_refused_with_the_field_named(text: str, message: str) -> None:
    assert message in problem_of("name: boxed\n" + text)
