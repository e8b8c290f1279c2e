"""The global options' values, and the options several commands share: ``--output``,
``--runtime``, ``--workdir``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True)
class Options:
    """The global options: ``--data-dir`` and ``--backend`` (embedded engine), ``--server``
    and ``--ca-cert``."""

    data_dir: str | None = None
    server: str | None = None
    ca_cert: str | None = None
    backend: str | None = None


OUTPUT = click.option(
    "--output", "-o", type=click.Choice(["table", "json", "yaml"]), default="table"
)


def RUNTIME(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--runtime FILE`` (repeatable)."""
    return click.option(
        "--runtime",
        "runtimes",
        multiple=True,
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="A Kubeflow TrainingRuntime or ClusterTrainingRuntime that a TrainJob may name "
        "(beside the built-in torch-, jax-, xgboost- and deepspeed-distributed); repeatable.",
    )(command)


def WORKDIR(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--workdir`` and ``--server-workdir``."""
    command = click.option(
        "--server-workdir",
        metavar="PATH",
        help="With a server: a directory on the server that the job runs in as it is "
        "(a shared file system), instead of sending --workdir.",
    )(command)
    return click.option(
        "--workdir",
        type=click.Path(exists=True, file_okay=False),
        help="The job's directory [default: the job file's folder]. With a server, it is "
        "sent (less what .gitignore and .trainfleetignore leave out) and the job runs in "
        "its own copy.",
    )(command)
