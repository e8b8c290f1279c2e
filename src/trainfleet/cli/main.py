"""The ``trainfleet`` command. Heavy modules are imported inside commands to start fast."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from trainfleet.cli.server_command import server
from trainfleet.cli.service import JobInput, Options
from trainfleet.cli.submarine_options import submarine_args_from, submarine_options

OUTPUT = click.option(
    "--output", "-o", type=click.Choice(["table", "json", "yaml"]), default="table"
)
STATES = ("queued", "starting", "running", "restarting", "succeeded", "failed", "cancelled")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--data-dir",
    envvar="TRAINFLEET_DATA_DIR",
    type=click.Path(file_okay=False),
    help="Where jobs and logs are kept [default: ~/.local/share/trainfleet].",
)
@click.option(
    "--server",
    metavar="URL",
    help="A trainfleet server to send commands to [default: TRAINFLEET_SERVER, then "
    "'server' in ~/.config/trainfleet/config.yaml; none: run jobs here].",
)
@click.option(
    "--ca-cert",
    metavar="FILE",
    help="The CA certificate (PEM) that signed an HTTPS server's certificate [default: "
    "TRAINFLEET_CA_CERT, then 'ca_cert' in the config file; none: the usual trusted CAs].",
)
@click.version_option(package_name="trainfleet")
@click.pass_context
def cli(ctx: click.Context, data_dir: str | None, server: str | None, ca_cert: str | None) -> None:
    """Run distributed deep-learning training jobs with one command.

    Without a server, jobs run on this machine (the engine is embedded); with one, every
    job command goes to the server, authenticated by TRAINFLEET_TOKEN (or 'token' in the
    config file).
    """
    ctx.obj = Options(data_dir, server, ca_cert)


def _job_input(job_file: str | None, flags: dict[str, Any]) -> JobInput:
    workdir, server_workdir = flags.pop("workdir"), flags.pop("server_workdir")
    runtimes = tuple(flags.pop("runtimes"))
    return JobInput(job_file, submarine_args_from(flags), workdir, server_workdir, runtimes)


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


@cli.command()
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


@cli.command()
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


@cli.command(name="_runner", hidden=True)
@click.argument("job_id")
@click.pass_obj
def runner(options: Options, job_id: str) -> None:
    """Run a stored job to its end (the background process of an embedded submit)."""
    from trainfleet.cli import commands

    sys.exit(commands.run_stored(options, job_id))


@cli.command(name="list")
@click.option("--state", type=click.Choice(STATES), help="Only jobs in this state.")
@click.option("--name", help="Only jobs of this name.")
@click.option("--label", "labels", multiple=True, metavar="K=V", help="Only jobs with this label.")
@click.option("--user", help="Only jobs this user submitted.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000))
@OUTPUT
@click.pass_obj
def list_jobs(
    options: Options,
    state: str | None,
    name: str | None,
    labels: tuple[str, ...],
    user: str | None,
    limit: int,
    output: str,
) -> None:
    """List jobs, newest first."""
    from trainfleet.cli import commands

    sys.exit(commands.list_jobs(options, output, limit, state, name, user, labels))


@cli.command()
@click.argument("job_id")
@OUTPUT
@click.pass_obj
def describe(options: Options, job_id: str, output: str) -> None:
    """Show a job with its tasks and events."""
    from trainfleet.cli import commands

    sys.exit(commands.describe(options, job_id, output))


@cli.command()
@click.argument("job_id")
@click.option("--role", help="Only this role's tasks.")
@click.option("--index", type=click.IntRange(0), help="Only this replica of --role.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option("--setup", is_flag=True, help="The setup phase instead: its environments' builds.")
@click.pass_obj
def logs(
    options: Options,
    job_id: str,
    role: str | None,
    index: int | None,
    follow: bool,
    setup: bool,
) -> None:
    """Print the logs of a job's tasks, prefixed role/index."""
    from trainfleet.cli import commands

    sys.exit(commands.logs(options, job_id, role, index, follow, setup))


@cli.command()
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@OUTPUT
@click.pass_obj
def events(options: Options, job_id: str, follow: bool, output: str) -> None:
    """Print a job's events (state changes of the job and its tasks)."""
    from trainfleet.cli import commands

    sys.exit(commands.events(options, job_id, follow, output))


@cli.command()
@click.argument("job_id")
@OUTPUT
@click.pass_obj
def stop(options: Options, job_id: str, output: str) -> None:
    """Cancel a job that has not ended, and wait until it has."""
    from trainfleet.cli import commands

    sys.exit(commands.stop(options, job_id, output))


@cli.command()
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Stop the job first if it is still running.")
@click.pass_obj
def delete(options: Options, job_id: str, force: bool) -> None:
    """Forget an ended job and delete its logs."""
    from trainfleet.cli import commands

    sys.exit(commands.delete(options, job_id, force))


cli.add_command(server)


@cli.group()
@click.option(
    "--database-url",
    envvar="TRAINFLEET_DATABASE_URL",
    help="The server's database, when it is not SQLite in the data directory [default: "
    "TRAINFLEET_DATABASE_URL]. Given here, its password shows in `ps`.",
)
@click.option(
    "--database-url-file",
    type=click.Path(dir_okay=False),
    help="A file whose first line is the server's database URL.",
)
@click.pass_context
def token(ctx: click.Context, database_url: str | None, database_url_file: str | None) -> None:
    """Make, list and revoke the server's API tokens (run where the server's data is)."""
    from trainfleet.server.serve import database_url_of

    try:
        database_url = database_url_of(database_url, database_url_file)
    except ValueError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    ctx.obj = (ctx.find_object(Options) or Options(), database_url)


@token.command(name="create")
@click.argument("name")
@click.option(
    "--user",
    "owner",
    help="The token's user (default: the user NAME, made if missing, in team 'default').",
)
@click.option("--admin", is_flag=True, help="The user NAME, if made now, is an administrator.")
@click.pass_obj
def token_create(
    where: tuple[Options, str | None], name: str, owner: str | None, admin: bool
) -> None:
    """Make a token named NAME and print it, this once only."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(where[0].data_dir, where[1]) as store:
        record, secret = tokens.create(store, name, owner, admin)
    click.echo(f"token {record.id} {name} of user {record.user} (shown only this once):", err=True)
    click.echo(secret)


@token.command(name="list")
@OUTPUT
@click.pass_obj
def token_list(where: tuple[Options, str | None], output: str) -> None:
    """List every token, revoked ones too (never the secrets)."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(where[0].data_dir, where[1]) as store:
        tokens.show(store.list_tokens(), output)


@token.command(name="revoke")
@click.argument("token_id")
@click.pass_obj
def token_revoke(where: tuple[Options, str | None], token_id: str) -> None:
    """Revoke the token with id TOKEN_ID: the server refuses it from now on."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(where[0].data_dir, where[1]) as store:
        tokens.revoke(store, token_id)
    click.echo(f"token {token_id} revoked")


ROLE = click.option(
    "--role",
    type=click.Choice(["viewer", "member", "team-admin"]),
    default="member",
    show_default=True,
    help="viewer: reads the team's jobs; member: also submits, stops its own; "
    "team-admin: also the team's members, queues and everyone's jobs.",
)


@cli.command()
@OUTPUT
@click.pass_obj
def whoami(options: Options, output: str) -> None:
    """Show the server's user of your token, and its teams and roles."""
    from trainfleet.cli import accounts

    sys.exit(accounts.whoami(options, output))


@cli.command()
@click.option("--user", help="Only this user's records.")
@click.option("--since", metavar="WHEN", help="Only records since: 30m, 1h, 2d, or an ISO time.")
@click.option("--action", help="Only this action, or those under it: job, job.stop, token, ...")
@click.option("--team", help="Only this team's records.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@OUTPUT
@click.pass_obj
def audit(
    options: Options,
    user: str | None,
    since: str | None,
    action: str | None,
    team: str | None,
    limit: int,
    output: str,
) -> None:
    """Show the server's audit trail, newest first: who changed what, when, from where, and
    how it ended (administrators: every record; team-admins: their teams')."""
    from trainfleet.cli import audit as trail

    sys.exit(trail.audit(options, user, since, action, team, limit, output))


@cli.group()
def user() -> None:
    """Make, list and disable the server's users (administrators)."""


@user.command(name="create")
@click.argument("name")
@click.option("--admin", is_flag=True, help="An administrator: may do everything.")
@click.option("--team", help="A team to put the user in.")
@ROLE
@click.pass_obj
def user_create(options: Options, name: str, admin: bool, team: str | None, role: str) -> None:
    """Make user NAME and print its first token, this once only."""
    from trainfleet.cli import accounts

    sys.exit(accounts.user_create(options, name, admin, team, role))


@user.command(name="list")
@OUTPUT
@click.pass_obj
def user_list(options: Options, output: str) -> None:
    """List every user with its teams."""
    from trainfleet.cli import accounts

    sys.exit(accounts.user_list(options, output))


@user.command(name="disable")
@click.argument("name")
@click.pass_obj
def user_disable(options: Options, name: str) -> None:
    """Disable user NAME: its tokens stop working at once; its jobs go on."""
    from trainfleet.cli import accounts

    sys.exit(accounts.user_disable(options, name))


@cli.group()
def team() -> None:
    """Make teams and choose their members (a team owns its queues and jobs)."""


@team.command(name="create")
@click.argument("name")
@OUTPUT
@click.pass_obj
def team_create(options: Options, name: str, output: str) -> None:
    """Make team NAME, with a queue of the same name as its default (administrators)."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_create(options, name, output))


@team.command(name="list")
@OUTPUT
@click.pass_obj
def team_list(options: Options, output: str) -> None:
    """List your teams (every team, for an administrator) with their members."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_list(options, output))


@team.command(name="add")
@click.argument("team_name", metavar="TEAM")
@click.argument("user_name", metavar="USER")
@ROLE
@OUTPUT
@click.pass_obj
def team_add(options: Options, team_name: str, user_name: str, role: str, output: str) -> None:
    """Put USER in TEAM with a role, or change its role there (team-admins)."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_add(options, team_name, user_name, role, output))


@team.command(name="remove")
@click.argument("team_name", metavar="TEAM")
@click.argument("user_name", metavar="USER")
@click.pass_obj
def team_remove(options: Options, team_name: str, user_name: str) -> None:
    """Take USER out of TEAM (team-admins): it no longer sees the team's jobs."""
    from trainfleet.cli import accounts

    sys.exit(accounts.team_remove(options, team_name, user_name))


@cli.group()
def secret() -> None:
    """Keep a team's secrets on the server; jobs name them in env: {secret: S, key: K}."""


@secret.command(name="create")
@click.argument("name")
@click.option("--from-literal", "literals", multiple=True, metavar="KEY=VALUE", help="A value.")
@click.option(
    "--from-file", "files", multiple=True, metavar="KEY=PATH", help="A value from a text file."
)
@click.option("--team", help="The secret's team (default: your only team).")
@click.pass_obj
def secret_create(
    options: Options,
    name: str,
    literals: tuple[str, ...],
    files: tuple[str, ...],
    team: str | None,
) -> None:
    """Store secret NAME, encrypted; its values never come back from the server."""
    from trainfleet.cli import accounts

    sys.exit(accounts.secret_create(options, name, literals, files, team))


@secret.command(name="list")
@OUTPUT
@click.pass_obj
def secret_list(options: Options, output: str) -> None:
    """List your teams' secrets and their keys (never their values)."""
    from trainfleet.cli import accounts

    sys.exit(accounts.secret_list(options, output))


@secret.command(name="delete")
@click.argument("name")
@click.option("--team", help="The secret's team (needed where several have one so named).")
@click.pass_obj
def secret_delete(options: Options, name: str, team: str | None) -> None:
    """Delete secret NAME: jobs naming it cannot start again."""
    from trainfleet.cli import accounts

    sys.exit(accounts.secret_delete(options, name, team))


@secret.command(name="rotate-key")
@click.option("--database-url", help="The server's database (default: its --data-dir's).")
@click.pass_obj
def secret_rotate_key(options: Options, database_url: str | None) -> None:
    """Put a new key first in the server's key file and encrypt every secret with it (run
    where the server's data is; the running server takes the new key up by itself)."""
    from trainfleet.cli import tokens
    from trainfleet.cli.commands import user_errors

    with user_errors(), tokens.store_of(options.data_dir, database_url) as store:
        rotated = tokens.rotate_secret_key(store, options.data_dir)
    click.echo(f"a new key encrypts the secrets now ({rotated} encrypted again); back it up")


@cli.group()
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


@cli.command()
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
    try:
        cli(prog_name="trainfleet")
    except KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C in a command that does not handle it: no traceback


if __name__ == "__main__":
    main()
