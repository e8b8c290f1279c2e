"""The ``trainfleet`` command. Heavy modules are imported inside commands to start fast."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from trainfleet.cli.errors import UserError
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


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--database-url",
    envvar="TRAINFLEET_DATABASE_URL",
    help="postgresql://user:password@host/db [default: TRAINFLEET_DATABASE_URL, then SQLite "
    "in the data directory]. Given here, its password shows in `ps`: prefer the variable or "
    "--database-url-file.",
)
@click.option(
    "--database-url-file",
    type=click.Path(dir_okay=False),
    help="A file whose first line is the database URL (keep it readable by the server only).",
)
@click.option(
    "--queues",
    "queues_file",
    type=click.Path(dir_okay=False),
    help="A YAML file of queues (quota, cohort, borrowing limit) to create or update.",
)
@click.option(
    "--max-body",
    type=click.IntRange(1024, 1 << 30),
    help="Largest request body in bytes (a job's text); larger ones get 413 [default: 1 MiB].",
)
@click.option(
    "--max-roles",
    type=click.IntRange(1, 10_000),
    help="Most roles of one job; more get 422 [default: 64].",
)
@click.option(
    "--max-tasks",
    type=click.IntRange(1, 1_000_000),
    help="Most tasks of one job (replicas summed over roles); more get 422 [default: 1000].",
)
@click.option(
    "--log-cap",
    envvar="TRAINFLEET_LOG_CAP",
    metavar="SIZE",
    help="Most bytes a task's log keeps, its first and last halves (512Mi, 2G) "
    "[default: TRAINFLEET_LOG_CAP, else 1Gi].",
)
@click.option(
    "--max-workdir",
    envvar="TRAINFLEET_MAX_WORKDIR",
    metavar="SIZE",
    help="Most bytes of a job directory that clients send, packed and unpacked (413 beyond) "
    "[default: TRAINFLEET_MAX_WORKDIR, else 100Mi].",
)
@click.option(
    "--environment-cache",
    envvar="TRAINFLEET_ENVIRONMENT_CACHE",
    metavar="SIZE",
    help="Bytes of built job environments kept, least recently used evicted first; those "
    "of running jobs are always kept [default: TRAINFLEET_ENVIRONMENT_CACHE, else 20Gi].",
)
@click.option(
    "--task-python",
    envvar="TRAINFLEET_TASK_PYTHON",
    metavar="PYTHON",
    help="The `python` of tasks whose job builds no environment of its own: its directory "
    "goes first on their PATH [default: TRAINFLEET_TASK_PYTHON, else the server's own].",
)
@click.option(
    "--tls-cert",
    envvar="TRAINFLEET_TLS_CERT",
    metavar="FILE",
    help="Serve HTTPS with this certificate (PEM, its chain after it) "
    "[default: TRAINFLEET_TLS_CERT, else plain HTTP].",
)
@click.option(
    "--tls-key",
    envvar="TRAINFLEET_TLS_KEY",
    metavar="FILE",
    help="The private key of --tls-cert (PEM, no passphrase) [default: TRAINFLEET_TLS_KEY].",
)
@click.option(
    "--isolate-teams",
    is_flag=True,
    envvar="TRAINFLEET_ISOLATE_TEAMS",
    help="Run each team's tasks as its own Unix account (tf-TEAM, made on demand; the "
    "server runs as root): no task reads the server's data or another team's.",
)
@click.option(
    "--team-account",
    "team_account",
    multiple=True,
    metavar="TEAM=USER",
    help="With --isolate-teams: an existing account for TEAM instead of tf-TEAM.",
)
@click.option(
    "--allow-path",
    "allow_paths",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    envvar="TRAINFLEET_ALLOW_PATHS",
    metavar="FOLDER",
    help="A folder of this machine jobs may run in (--server-workdir) and mount (mounts:, "
    "hostPath); with it, no other beyond a job's own folder [default: TRAINFLEET_ALLOW_PATHS "
    "(colon-separated), else any; none with --isolate-teams].",
)
@click.option(
    "--audit-retention",
    envvar="TRAINFLEET_AUDIT_RETENTION",
    metavar="DAYS",
    help="Remove audit records older than this many days, at start and then daily "
    "[default: TRAINFLEET_AUDIT_RETENTION, else keep every record].",
)
@click.pass_obj
def server(
    options: Options,
    host: str,
    port: int,
    database_url: str | None,
    database_url_file: str | None,
    queues_file: str | None,
    max_body: int | None,
    max_roles: int | None,
    max_tasks: int | None,
    log_cap: str | None,
    max_workdir: str | None,
    environment_cache: str | None,
    task_python: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    isolate_teams: bool,
    team_account: tuple[str, ...],
    allow_paths: tuple[str, ...],
    audit_retention: str | None,
) -> None:
    """Serve the REST API and run submitted jobs (stop with Ctrl-C).

    On the first start it prints an admin token once, or takes TRAINFLEET_ADMIN_TOKEN.
    Jobs keep running while the server is stopped or restarted; it adopts them again.
    Tokens travel in every request: beyond this machine (--host other than 127.0.0.1),
    serve HTTPS with --tls-cert and --tls-key; clients trust the certificate through
    --ca-cert or TRAINFLEET_CA_CERT unless a CA they already trust signed it.
    """
    from pathlib import Path

    from trainfleet.backends.choose import backend_for
    from trainfleet.backends.local.processes import log_cap_setting
    from trainfleet.cli.config import backend_config
    from trainfleet.domain.errors import TrainfleetError
    from trainfleet.environments.cache import cache_size
    from trainfleet.environments.task_base import server_task_base
    from trainfleet.server.host_paths import HostPaths
    from trainfleet.server.serve import (
        audit_retention_of,
        database_url_of,
        serve,
        team_accounts_of,
        tls_of,
    )
    from trainfleet.server.settings import Settings
    from trainfleet.spec.loading import load_queues_file

    try:
        retention = audit_retention_of(audit_retention)
        tls = tls_of(tls_cert, tls_key)
        database_url = database_url_of(database_url, database_url_file)
        queues = load_queues_file(queues_file) if queues_file else None
        cap = log_cap_setting(log_cap, "--log-cap") if log_cap else None
        backend = backend_for(backend_config(), supervised=True, log_cap=cap)
        workdir_cap = size_setting(max_workdir, "--max-workdir") if max_workdir else None
        given = {"max_body": max_body, "max_roles": max_roles, "max_tasks": max_tasks}
        given["max_workdir"] = workdir_cap
        limits = {name: value for name, value in given.items() if value is not None}
        accounts = team_accounts_of(team_account) if isolate_teams or team_account else None
        allowed = [Path(path) for path in allow_paths] if allow_paths or accounts else None
        settings = Settings(
            workdir=Path.cwd(), host_paths=HostPaths(allowed), audit_retention=retention, **limits
        )
        base = server_task_base(task_python)
        cache = cache_size(environment_cache) if environment_cache else None
        serve(
            options.data_dir,
            host,
            port,
            database_url,
            queues,
            backend,
            settings,
            base,
            cache,
            tls,
            accounts,
        )
    except (TrainfleetError, ValueError, OSError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)


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


def size_setting(value: str, source: str) -> int:
    """Bytes in a size flag's ``value`` (``100Mi``, ``2G``); UserError naming ``source``."""
    from trainfleet.spec import quantity

    try:
        return quantity.size_setting(value, source, 0, minimum=1024)
    except ValueError as error:
        raise UserError(str(error)) from None
