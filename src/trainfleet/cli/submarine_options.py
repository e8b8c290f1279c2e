"""Submarine-style flags for ``trainfleet run`` (``--num_workers 2 --worker_launch_cmd ...``).

>>> import click
>>> @click.command()
... @submarine_options
... def run(**kwargs: object) -> None:
...     args = submarine_args_from(kwargs)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # the spec models load only when flags are really given
    from trainfleet.spec.submarine import SubmarineArgs

F = TypeVar("F", bound=Callable[..., Any])

SUBMARINE_PARAMS = (
    "name", "framework", "num_workers", "worker_resources", "worker_launch_cmd",
    "worker_docker_image", "num_ps", "ps_resources", "ps_launch_cmd", "ps_docker_image",
    "docker_image", "env", "input_path", "checkpoint_path", "tensorboard", "quicklink",
)  # fmt: skip
"""The keyword names the options add to the command's parameters (SubmarineArgs' fields)."""

_RESOURCES_HELP = "What one {} needs, e.g. memory=8G,vcores=2,gpu=1 (bare memory numbers are MiB)."
_IMAGE_HELP = "Container image the {} run in (podman, or docker; see image: in job files)."

_OPTIONS = (
    click.option("--name", help="Job name (Submarine style)."),
    click.option(
        "--framework",
        metavar="NAME",
        help="tensorflow (the default), pytorch, jax, xgboost, mxnet or generic.",
    ),
    click.option(
        "--num_workers", type=int, help="Number of workers (1 if a launch command is given)."
    ),
    click.option("--worker_resources", metavar="LIST", help=_RESOURCES_HELP.format("worker")),
    click.option("--worker_launch_cmd", metavar="CMD", help="Shell command each worker runs."),
    click.option("--worker_docker_image", metavar="IMAGE", help=_IMAGE_HELP.format("workers")),
    click.option("--num_ps", type=int, help="Number of parameter servers (0: none)."),
    click.option("--ps_resources", metavar="LIST", help=_RESOURCES_HELP.format("parameter server")),
    click.option(
        "--ps_launch_cmd", metavar="CMD", help="Shell command each parameter server runs."
    ),
    click.option(
        "--ps_docker_image", metavar="IMAGE", help=_IMAGE_HELP.format("parameter servers")
    ),
    click.option(
        "--docker_image", metavar="IMAGE", help=_IMAGE_HELP.format("roles without their own")
    ),
    click.option(
        "--env", multiple=True, metavar="K=V", help="Environment of every task (repeatable)."
    ),
    click.option("--input_path", metavar="PATH", help="Where the training data is."),
    click.option("--checkpoint_path", metavar="PATH", help="Where checkpoints are written."),
    click.option(
        "--tensorboard",
        is_flag=True,
        default=None,
        help="Run TensorBoard beside the job, over its checkpoint_path (tensorboard: true).",
    ),
    click.option(
        "--quicklink",
        multiple=True,
        metavar="NAME=http://ROLE-INDEX:PORT",
        help="Link a task's page, proxied by a server (repeatable); PORT becomes the role's.",
    ),
)


def submarine_options(command: F) -> F:
    """Add the Submarine flags to a click command, in the order Submarine documents them."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def submarine_args_from(kwargs: Mapping[str, Any]) -> SubmarineArgs | None:
    """The Submarine flags among a command's keyword arguments; None when none was given.

    ``kwargs`` is not changed; drop ``SUBMARINE_PARAMS`` from it to get the other options.
    """
    values: dict[str, Any] = {name: kwargs.get(name) for name in SUBMARINE_PARAMS}
    values["env"] = tuple(values["env"] or ())
    values["quicklink"] = tuple(values["quicklink"] or ())
    if not any(value not in (None, ()) for value in values.values()):
        return None
    from trainfleet.spec.submarine import SubmarineArgs

    return SubmarineArgs(**values)
