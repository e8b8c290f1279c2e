"""Submarine-style flags: the pure conversion and the click options."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
import pytest
from click.testing import CliRunner

from trainfleet.cli.submarine_options import (
    SUBMARINE_PARAMS,
    submarine_args_from,
    submarine_options,
)
from trainfleet.spec.errors import SpecError
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.submarine import SubmarineArgs, from_submarine_args, parse_resource_list

GIB = 2**30


def errors(args: SubmarineArgs) -> list[str]:
    with pytest.raises(SpecError) as caught:
        from_submarine_args(args)
    return [str(problem) for problem in caught.value.problems]


@pytest.mark.parametrize(
    ("text", "cpu", "memory", "gpu"),
    [
        ("memory=8G,vcores=2,gpu=1", 2000, 8 * 10**9, 1),
        ("memory=4096,vcores=1", 1000, 4 * GIB, 0),  # bare memory is MiB, as in YARN
        ("memory-mb=2048, yarn.io/gpu=2", None, 2 * GIB, 2),
        ("Memory=2Gi,CPU=500m,", 500, 2 * GIB, 0),
        ("vcores=0.5", 500, None, 0),
    ],
)
def test_parse_resource_list(text: str, cpu: int | None, memory: int | None, gpu: int) -> None:
    resources = parse_resource_list(text)
    assert (resources.cpu, resources.memory, resources.gpu) == (cpu, memory, gpu)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("memory=8X", "--ps_resources: 'memory=8X': cannot parse memory '8X'"),
        ("memory=8G,vcores=two", "--ps_resources: 'vcores=two': cannot parse cpu 'two'"),
        (
            "disk=10G",
            "--ps_resources: 'disk=10G': unknown resource 'disk': use memory, vcores or gpu",
        ),
        ("memory", "--ps_resources: 'memory': expected name=value, e.g. memory=8G"),
        ("memory=", "--ps_resources: 'memory=': expected name=value"),
        ("gpu=1,yarn.io/gpu=2", "--ps_resources: 'yarn.io/gpu=2': gpu is given twice"),
        ("gpu=1.5", "--ps_resources: 'gpu=1.5': ask for whole GPUs, or for a fraction below 1"),
        ("gpu=lots", "--ps_resources: 'gpu=lots': expected a number, got 'lots'"),
        (" , ", "--ps_resources: no resources given: e.g. memory=8G,vcores=2,gpu=1"),
    ],
)
def test_parse_resource_list_errors(text: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_resource_list(text, field="--ps_resources")
    assert str(caught.value).startswith(message)
    assert caught.value.problems[0].field == "--ps_resources"


def test_parse_resource_list_reports_every_bad_part() -> None:
    with pytest.raises(SpecError) as caught:
        parse_resource_list("memory=8X,vcores=2,gpu=x")
    assert [p.message.split(":")[0] for p in caught.value.problems] == ["'memory=8X'", "'gpu=x'"]


def test_a_tensorflow_ps_job() -> None:
    job = from_submarine_args(
        SubmarineArgs(
            name="mnist",
            num_workers=2,
            worker_resources="memory=8G,vcores=2,gpu=1",
            worker_launch_cmd="python mnist.py --steps 100",
            num_ps=1,
            ps_resources="memory=2G,vcores=1",
            ps_launch_cmd="trainfleet tf-server",
            env=("DATA=/data", "OPTS=a=b"),
            input_path="/data/mnist",
            checkpoint_path="/ckpt/mnist",
        )
    )
    spec = job.spec
    assert job.source == "submarine"
    assert job.warnings == []
    assert spec.name == "mnist"
    assert spec.framework is Framework.TENSORFLOW  # the default
    assert list(spec.roles) == ["worker", "ps"]
    worker, ps = spec.roles["worker"], spec.roles["ps"]
    assert (worker.replicas, worker.command) == (2, "python mnist.py --steps 100")
    assert (worker.resources.cpu, worker.resources.memory, worker.resources.gpu) == (2000, 8e9, 1)
    assert (ps.replicas, ps.runs_tf_server(), ps.resources.memory) == (1, True, 2e9)
    assert spec.env == {"DATA": "/data", "OPTS": "a=b"}
    assert (spec.input_path, spec.checkpoint_path) == ("/data/mnist", "/ckpt/mnist")


def test_defaults_and_framework() -> None:
    spec = from_submarine_args(
        SubmarineArgs(name="t", framework="PyTorch", worker_launch_cmd="python t.py")
    ).spec
    assert spec.framework is Framework.PYTORCH
    assert list(spec.roles) == ["worker"]  # no --num_ps: no ps role
    assert spec.roles["worker"].replicas == 1  # a launch command without --num_workers: one


def test_num_ps_zero_means_no_ps_role() -> None:
    job = from_submarine_args(
        SubmarineArgs(name="t", worker_launch_cmd="python t.py", num_ps=0, ps_launch_cmd="x")
    )
    assert list(job.spec.roles) == ["worker"]
    assert job.warnings == ["--ps_launch_cmd is ignored: --num_ps is 0"]


def test_images_are_kept() -> None:
    job = from_submarine_args(
        SubmarineArgs(
            name="t",
            worker_launch_cmd="python t.py",
            num_ps=1,
            ps_launch_cmd="trainfleet tf-server",
            docker_image="tf:2.21",
            ps_docker_image="tf-ps:1",
        )
    )
    assert job.spec.roles["worker"].image == "tf:2.21"
    assert job.spec.roles["ps"].image == "tf-ps:1"
    assert job.warnings == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (SubmarineArgs(worker_launch_cmd="x"), ["--name: is required"]),
        (
            SubmarineArgs(name="t", num_workers=2),
            ["--worker_launch_cmd: is required when --num_workers is 2"],
        ),
        (
            SubmarineArgs(name="t", num_workers=-1, worker_launch_cmd="x"),
            ["--num_workers: must be at least 0, got -1"],
        ),
        (
            SubmarineArgs(name="t", worker_launch_cmd="x", num_ps=1),
            [
                "--ps_launch_cmd: is required when --num_ps is 1 "
                "(for a plain TensorFlow parameter server: 'trainfleet tf-server')"
            ],
        ),
        (
            SubmarineArgs(name="t", num_workers=0, worker_launch_cmd="x"),
            ["--num_workers: nothing to run: give --num_workers N and --worker_launch_cmd"],
        ),
        (
            SubmarineArgs(name="t", num_ps=1, ps_launch_cmd="trainfleet tf-server"),
            [
                "--num_workers: nothing to run: give --num_workers N and --worker_launch_cmd "
                "(parameter servers alone never finish)"
            ],
        ),
        (
            SubmarineArgs(name="t", worker_launch_cmd="x", env=("A=1", "NOVALUE", "=v")),
            ["--env: expected NAME=VALUE, got 'NOVALUE'", "--env: expected NAME=VALUE, got '=v'"],
        ),
        (
            SubmarineArgs(name="t", worker_launch_cmd="x", worker_resources="memory=lots"),
            ["--worker_resources: 'memory=lots': cannot parse memory 'lots'"],
        ),
        (
            SubmarineArgs(name="My_Job", framework="tf", worker_launch_cmd="x"),
            [
                "--name: invalid job name 'My_Job'",
                "--framework: expected 'tensorflow', 'pytorch', 'jax', 'xgboost', 'mxnet', "
                "'mpi' or 'generic', got 'tf'",
            ],
        ),
        (
            SubmarineArgs(name="t", worker_launch_cmd="  "),
            ["--worker_launch_cmd: command must not be empty"],
        ),
    ],
)
def test_errors_name_the_flag(args: SubmarineArgs, expected: list[str]) -> None:
    found = errors(args)
    assert len(found) == len(expected)
    for line, start in zip(found, expected, strict=True):
        assert line.startswith(start)


# The click options.


@click.command()
@submarine_options
@click.option("--verbose", is_flag=True)
def run(verbose: bool, **kwargs: Any) -> None:
    """A stand-in for `trainfleet run` with the Submarine flags added."""
    args = submarine_args_from(kwargs)
    if args is None:
        click.echo("no submarine flags")
        return
    try:
        job = from_submarine_args(args)
    except SpecError as error:
        raise click.UsageError(str(error)) from None
    click.echo(job.spec.model_dump_json(exclude_defaults=True))


def test_options_build_the_job() -> None:
    result = CliRunner().invoke(
        run,
        [
            "--name", "mnist",
            "--num_workers", "2",
            "--worker_resources", "memory=8G,vcores=2,gpu=1",
            "--worker_launch_cmd", "python mnist.py",
            "--num_ps", "1",
            "--ps_launch_cmd", "trainfleet tf-server",
            "--env", "A=1",
            "--env", "B=2",
            "--checkpoint_path", "/ckpt",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert '"worker":{"replicas":2,"command":"python mnist.py"' in result.output
    assert '"env":{"A":"1","B":"2"}' in result.output
    assert '"checkpoint_path":"/ckpt"' in result.output


def test_no_submarine_flag_gives_none() -> None:
    result = CliRunner().invoke(run, ["--verbose"])
    assert result.exit_code == 0
    assert result.output == "no submarine flags\n"
    assert submarine_args_from({"verbose": True}) is None


def test_bad_flags_exit_2_with_the_flag_named() -> None:
    result = CliRunner().invoke(run, ["--name", "t", "--num_workers", "3"])
    assert result.exit_code == 2
    assert "--worker_launch_cmd: is required when --num_workers is 3" in result.output
    result = CliRunner().invoke(run, ["--num_workers", "two"])
    assert result.exit_code == 2
    assert "'two' is not a valid integer" in result.output


def test_help_lists_every_flag_with_underscores() -> None:
    result = CliRunner().invoke(run, ["--help"])
    for name in SUBMARINE_PARAMS:
        assert f"--{name}" in result.output
    assert tuple(field.name for field in dataclasses.fields(SubmarineArgs)) == SUBMARINE_PARAMS


def test_submarine_args_from_kwargs() -> None:
    args = submarine_args_from({"num_ps": 0, "env": (), "verbose": False, "name": None})
    assert args == SubmarineArgs(num_ps=0)
