"""``trainfleet export``, ``schema`` and ``tf-server``: tools that need no engine or server."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import RUNTIME


@click.command()
@click.argument("job_file")
@click.option(
    "--to",
    "target",
    type=click.Choice(["kubeflow", "trainjob"]),
    default="kubeflow",
    show_default=True,
    help="kubeflow: the training operator's TFJob, PyTorchJob, JAXJob or XGBoostJob; "
    "trainjob: Kubeflow Trainer's TrainJob on a built-in runtime.",
)
@RUNTIME
def export(job_file: str, target: str, runtimes: tuple[str, ...]) -> None:
    """Print JOB_FILE as the manifest that runs it on Kubernetes (kubectl apply -f -)."""
    from trainfleet.cli import commands

    sys.exit(commands.export(job_file, target, runtimes))


@click.command()
def schema() -> None:
    """Print the JSON Schema of job files (for editors)."""
    import json

    from trainfleet.spec.models import JobSpec

    click.echo(json.dumps(JobSpec.model_json_schema(), indent=2))


@click.command(
    name="tf-server",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def tf_server(args: tuple[str, ...]) -> None:
    """A TensorFlow gRPC server that joins the cluster in TF_CONFIG."""
    from trainfleet.programs import tf_server as program

    sys.exit(program.main(list(args)))
