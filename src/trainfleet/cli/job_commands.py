"""``trainfleet list``, ``describe``, ``logs``, ``events``, ``stop`` and ``delete``: the
commands on jobs that are already there."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.options import OUTPUT, Options

STATES = ("queued", "starting", "running", "restarting", "succeeded", "failed", "cancelled")


@click.command(name="list")
@click.option("--state", type=click.Choice(STATES), help="Only jobs in this state.")
@click.option("--name", help="Only jobs of this name.")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Only jobs with this label.")
@click.option("--user", help="Only jobs this user submitted.")
@click.option("--team", help="Only jobs of this team.")
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@OUTPUT
@click.pass_obj
def list_jobs(
    options: Options,
    state: str | None,
    name: str | None,
    labels: tuple[str, ...],
    user: str | None,
    team: str | None,
    queue: str | None,
    limit: int,
    output: str,
) -> None:
    """List jobs, newest first."""
    from trainfleet.cli import commands

    sys.exit(commands.list_jobs(options, output, limit, state, name, user, labels, team, queue))


@click.command()
@click.argument("job_id")
@OUTPUT
@click.pass_obj
def describe(options: Options, job_id: str, output: str) -> None:
    """Show a job with its tasks and events."""
    from trainfleet.cli import commands

    sys.exit(commands.describe(options, job_id, output))


@click.command()
@click.argument("job_id")
@OUTPUT
@click.pass_obj
def checkpoints(options: Options, job_id: str, output: str) -> None:
    """List a job's committed checkpoints (trainfleet.checkpoint's steps), oldest first."""
    from trainfleet.cli import commands

    sys.exit(commands.checkpoints(options, job_id, output))


@click.command()
@click.argument("job_id")
@click.option("--role", help="Only this role's tasks.")
@click.option("--index", type=click.IntRange(0), help="Only this replica of --role.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option("--setup", is_flag=True, help="The setup phase instead: its environments' builds.")
@click.option(
    "--output",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[NAME]",
    help="The job's outputs instead ($TRAINFLEET_OUTPUT_DIR): list them, or print output NAME.",
)
@click.pass_obj
def logs(
    options: Options,
    job_id: str,
    role: str | None,
    index: int | None,
    follow: bool,
    setup: bool,
    output: str | None,
) -> None:
    """Print the logs of a job's tasks, prefixed role/index.

    With --output, the job's outputs instead (the files its tasks wrote to
    $TRAINFLEET_OUTPUT_DIR): a table of them, or output NAME's bytes as they are."""
    from trainfleet.cli import commands

    sys.exit(commands.logs(options, job_id, role, index, follow, setup, output))


@click.command()
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@OUTPUT
@click.pass_obj
def events(options: Options, job_id: str, follow: bool, output: str) -> None:
    """Print a job's events (state changes of the job and its tasks)."""
    from trainfleet.cli import commands

    sys.exit(commands.events(options, job_id, follow, output))


@click.command()
@click.argument("job_id")
@OUTPUT
@click.pass_obj
def stop(options: Options, job_id: str, output: str) -> None:
    """Cancel a job that has not ended, and wait until it has."""
    from trainfleet.cli import commands

    sys.exit(commands.stop(options, job_id, output))


@click.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Stop the job first if it is still running.")
@click.pass_obj
def delete(options: Options, job_id: str, force: bool) -> None:
    """Forget an ended job and delete its logs."""
    from trainfleet.cli import commands

    sys.exit(commands.delete(options, job_id, force))
