"""``trainfleet run``, ``submit`` and ``_runner``: the commands that start a job.

Only what parses their flags is imported here; what runs a job loads when it runs."""

from __future__ import annotations

import sys
from typing import Any

import click

from trainfleet.cli.options import OUTPUT, RUNTIME, WORKDIR, Options
from trainfleet.cli.service import JobInput
from trainfleet.cli.submarine_options import submarine_args_from, submarine_options


def _job_input(job_file: str | None, flags: dict[str, Any]) -> JobInput:
    workdir, server_workdir = flags.pop("workdir"), flags.pop("server_workdir")
    runtimes = tuple(flags.pop("runtimes"))
    return JobInput(job_file, submarine_args_from(flags), workdir, server_workdir, runtimes)


@click.command()
@click.argument("job_file", required=False)
@submarine_options
@WORKDIR
@RUNTIME
@click.option("--dry-run", is_flag=True, help="Print the resolved job and each task's environment.")
@click.pass_obj
def run(options: Options, /, job_file: str | None, dry_run: bool, **flags: Any) -> None:
    """Run JOB_FILE (a trainfleet job, or a Kubeflow manifest) and show it until it ends.

    Without a server it runs here and now; with one, on the server, and Ctrl-C cancels it
    there. Instead of a file, Submarine-style flags describe the job
    (--num_workers 2 --worker_launch_cmd 'python train.py' ...). --dry-run always shows
    what would run on this machine.
    """
    from trainfleet.cli import commands

    sys.exit(commands.run(options, _job_input(job_file, flags), dry_run))


@click.command()
@click.argument("job_file", required=False)
@submarine_options
@WORKDIR
@RUNTIME
@OUTPUT
@click.pass_obj
def submit(options: Options, /, job_file: str | None, output: str, **flags: Any) -> None:
    """Start JOB_FILE in the background and print its job id.

    With a server, the server runs it; without one, a background trainfleet process on
    this machine does (its own output: runner.log in the job's folder).
    """
    from trainfleet.cli import commands

    sys.exit(commands.submit(options, _job_input(job_file, flags), output))


@click.command(name="_runner", hidden=True)
@click.argument("job_id")
@click.pass_obj
def runner(options: Options, job_id: str) -> None:
    """Run a stored job to its end (the background process of an embedded submit)."""
    from trainfleet.cli import commands

    sys.exit(commands.run_stored(options, job_id))
