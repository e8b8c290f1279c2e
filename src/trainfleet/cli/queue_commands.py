"""``trainfleet queue``: create, list and describe the queues jobs wait in."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import OUTPUT, Options


@click.group()
def queue() -> None:
    """Create, list and describe the queues jobs wait in (quota, cohort, borrowing)."""


@queue.command(name="create")
@click.argument("name")
@click.option("--cohort", help="The cohort whose queues lend each other unused quota.")
@click.option("--nominal", metavar="R=N,...", help="Quota, e.g. cpu=16,memory=64Gi,gpu=8.")
@click.option("--borrowing-limit", metavar="R=N,...", help="Most it may borrow, e.g. gpu=4.")
@OUTPUT
@click.pass_obj
def queue_create(
    options: Options,
    name: str,
    cohort: str | None,
    nominal: str | None,
    borrowing_limit: str | None,
    output: str,
) -> None:
    """Create queue NAME, or replace its configuration."""
    from trainfleet.cli import commands

    sys.exit(commands.queue_create(options, name, cohort, nominal, borrowing_limit, output))


@queue.command(name="list")
@OUTPUT
@click.pass_obj
def queue_list(options: Options, output: str) -> None:
    """List every queue with its quota, what it uses and how many jobs run and wait."""
    from trainfleet.cli import commands

    sys.exit(commands.queue_list(options, output))


@queue.command(name="describe")
@click.argument("name")
@OUTPUT
@click.pass_obj
def queue_describe(options: Options, name: str, output: str) -> None:
    """Show queue NAME with its running and waiting jobs."""
    from trainfleet.cli import commands

    sys.exit(commands.queue_describe(options, name, output))
