"""``trainfleet top``: what running tasks use (CPU, memory, GPUs), from the samples each
task's supervisor keeps beside its log."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import Options


@click.command()
@click.argument("job_id", required=False)
@click.option(
    "--watch",
    "-w",
    type=click.FloatRange(0.5, 3600),
    metavar="SECONDS",
    help="Show it again every SECONDS until Ctrl-C.",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: each job's tasks with their newest sample and their history.",
)
@click.pass_obj
def top(options: Options, job_id: str | None, watch: float | None, output: str) -> None:
    """Show what running tasks use: CPU, memory, GPU and GPU memory.

    With JOB_ID, every task of that job (and, with -o json, each one's history: the last
    hour's samples, then minute averages of the day before); without, each running task
    of the running jobs. Tasks are sampled every 5 s by default (TRAINFLEET_USAGE_INTERVAL,
    or the server's --usage-interval).
    """
    from trainfleet.cli import usage_top

    sys.exit(usage_top.top(options, job_id, watch, output))
