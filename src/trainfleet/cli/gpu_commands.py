"""``trainfleet gpus``: the GPUs jobs are placed on, and clearing an unhealthy one."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import OUTPUT, Options


@click.group(invoke_without_command=True)
@OUTPUT
@click.pass_context
def gpus(context: click.Context, output: str) -> None:
    """List the GPUs jobs are placed on (this machine's, or the server's): model, memory,
    utilisation, temperature, health and the tasks holding each (job/role/index, share).

    An unhealthy GPU (lost, or with uncorrected memory errors) gets no new task, and a job
    on it is queued again to run on healthy GPUs, until its driver reports it well again or
    an operator runs ``trainfleet gpus clear INDEX``."""
    if context.invoked_subcommand is None:
        from trainfleet.cli import gpus_view

        sys.exit(gpus_view.show(context.obj, output))


@gpus.command(name="list")
@OUTPUT
@click.pass_obj
def gpus_list(options: Options, output: str) -> None:
    """List the GPUs jobs are placed on, as ``trainfleet gpus`` does."""
    from trainfleet.cli import gpus_view

    sys.exit(gpus_view.show(options, output))


@gpus.command(name="clear")
@click.argument("index", type=click.IntRange(0, 1023))
@OUTPUT
@click.pass_obj
def gpus_clear(options: Options, index: int, output: str) -> None:
    """Mark GPU INDEX healthy again (operators only): the problems its driver reports now
    are ignored, and new tasks may be placed on it; a new problem marks it again."""
    from trainfleet.cli import gpus_view

    sys.exit(gpus_view.clear(options, index, output))
