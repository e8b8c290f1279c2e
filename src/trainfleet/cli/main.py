"""The ``trainfleet`` command. Heavy modules are imported inside commands to start fast."""

from __future__ import annotations

import sys
from typing import Any

import click

from trainfleet.cli.submarine_options import submarine_args_from, submarine_options


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--data-dir",
    envvar="TRAINFLEET_DATA_DIR",
    type=click.Path(file_okay=False),
    help="Where jobs and logs are kept [default: ~/.local/share/trainfleet].",
)
@click.version_option(package_name="trainfleet")
@click.pass_context
def cli(ctx: click.Context, data_dir: str | None) -> None:
    """Run distributed deep-learning training jobs with one command."""
    ctx.obj = data_dir


@cli.command()
@click.argument("job_file", required=False)
@submarine_options
@click.option("--dry-run", is_flag=True, help="Print the resolved job and each task's environment.")
@click.pass_obj
def run(data_dir: str | None, /, job_file: str | None, dry_run: bool, **flags: Any) -> None:
    """Run JOB_FILE (a trainfleet job, or a Kubeflow manifest) here and now.

    Instead of a file, Submarine-style flags describe the job
    (--num_workers 2 --worker_launch_cmd 'python train.py' ...).
    """
    from trainfleet.cli import commands

    sys.exit(commands.run(data_dir, job_file, submarine_args_from(flags), dry_run))


@cli.command(name="list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@click.option("--output", "-o", type=click.Choice(["table", "json", "yaml"]), default="table")
@click.pass_obj
def list_jobs(data_dir: str | None, limit: int, output: str) -> None:
    """List jobs, newest first."""
    from trainfleet.cli import commands

    commands.list_jobs(data_dir, limit, output)


@cli.command()
@click.argument("job_id")
@click.option("--output", "-o", type=click.Choice(["table", "json", "yaml"]), default="table")
@click.pass_obj
def describe(data_dir: str | None, job_id: str, output: str) -> None:
    """Show a job with its tasks and events."""
    from trainfleet.cli import commands

    sys.exit(commands.describe(data_dir, job_id, output))


@cli.command()
@click.argument("job_id")
@click.option("--role", help="Only this role's tasks.")
@click.option("--index", type=click.IntRange(0), help="Only this replica of --role.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.pass_obj
def logs(
    data_dir: str | None, job_id: str, role: str | None, index: int | None, follow: bool
) -> None:
    """Print the logs of a job's tasks, prefixed role/index."""
    from trainfleet.cli import commands

    sys.exit(commands.logs(data_dir, job_id, role, index, follow))


@cli.command()
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option("--output", "-o", type=click.Choice(["table", "json", "yaml"]), default="table")
@click.pass_obj
def events(data_dir: str | None, job_id: str, follow: bool, output: str) -> None:
    """Print a job's events (state changes of the job and its tasks)."""
    from trainfleet.cli import commands

    sys.exit(commands.events(data_dir, job_id, follow, output))


@cli.command()
@click.argument("job_id")
@click.pass_obj
def stop(data_dir: str | None, job_id: str) -> None:
    """Cancel a job that has not ended."""
    from trainfleet.cli import commands

    sys.exit(commands.stop(data_dir, job_id))


@cli.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Stop the job first if it is still running.")
@click.pass_obj
def delete(data_dir: str | None, job_id: str, force: bool) -> None:
    """Forget an ended job and delete its logs."""
    from trainfleet.cli import commands

    sys.exit(commands.delete(data_dir, job_id, force))


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--database-url",
    envvar="TRAINFLEET_DATABASE_URL",
    help="postgresql://user:password@host/db [default: SQLite in the data directory].",
)
@click.pass_obj
def server(data_dir: str | None, host: str, port: int, database_url: str | None) -> None:
    """Serve the REST API and run submitted jobs (stop with Ctrl-C).

    On the first start it prints an admin token once, or takes TRAINFLEET_ADMIN_TOKEN.
    Jobs keep running while the server is stopped or restarted; it adopts them again.
    """
    from trainfleet.server.serve import serve
    from trainfleet.store.errors import StoreError

    try:
        serve(data_dir, host, port, database_url)
    except (StoreError, ValueError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)


@cli.command()
def schema() -> None:
    """Print the JSON Schema of job files (for editors)."""
    import json

    from trainfleet.spec.models import JobSpec

    click.echo(json.dumps(JobSpec.model_json_schema(), indent=2))


@cli.command(
    name="tf-server",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def tf_server(args: tuple[str, ...]) -> None:
    """A TensorFlow gRPC server that joins the cluster in TF_CONFIG."""
    from trainfleet.programs import tf_server as program

    sys.exit(program.main(list(args)))


def main() -> None:
    cli(prog_name="trainfleet")


if __name__ == "__main__":
    main()
