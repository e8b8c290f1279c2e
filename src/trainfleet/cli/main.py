"""The ``trainfleet`` command: its global options, and each command imported only when it is
run or its help is shown (``COMMANDS``), so that ``--help`` and ``run`` start fast."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.errors import UserError
from trainfleet.cli.lazy import Lazy, LazyGroup
from trainfleet.cli.options import Options

COMMANDS = {
    "run": Lazy(
        "trainfleet.cli.launch_commands:run",
        "Run JOB_FILE (a trainfleet job, or a Kubeflow manifest) and show it until it ends.",
    ),
    "submit": Lazy(
        "trainfleet.cli.launch_commands:submit",
        "Start JOB_FILE in the background and print its job id.",
    ),
    "_runner": Lazy("trainfleet.cli.launch_commands:runner", "", hidden=True),
    "list": Lazy("trainfleet.cli.job_commands:list_jobs", "List jobs, newest first."),
    "describe": Lazy(
        "trainfleet.cli.job_commands:describe", "Show a job with its tasks and events."
    ),
    "logs": Lazy(
        "trainfleet.cli.job_commands:logs", "Print the logs of a job's tasks, prefixed role/index."
    ),
    "events": Lazy(
        "trainfleet.cli.job_commands:events",
        "Print a job's events (state changes of the job and its tasks).",
    ),
    "stop": Lazy(
        "trainfleet.cli.job_commands:stop",
        "Cancel a job that has not ended, and wait until it has.",
    ),
    "delete": Lazy(
        "trainfleet.cli.job_commands:delete", "Forget an ended job and delete its logs."
    ),
    "token": Lazy(
        "trainfleet.cli.token_commands:token",
        "Make, list and revoke the server's API tokens (run where the server's data is).",
    ),
    "whoami": Lazy(
        "trainfleet.cli.account_commands:whoami",
        "Show the server's user of your token, and its teams and roles.",
    ),
    "audit": Lazy(
        "trainfleet.cli.account_commands:audit",
        "Show the server's audit trail, newest first: who changed what, when, from where, and "
        "how it ended (administrators: every record; team-admins: their teams').",
    ),
    "user": Lazy(
        "trainfleet.cli.account_commands:user",
        "Make, list and disable the server's users (administrators).",
    ),
    "team": Lazy(
        "trainfleet.cli.account_commands:team",
        "Make teams and choose their members (a team owns its queues and jobs).",
    ),
    "secret": Lazy(
        "trainfleet.cli.secret_commands:secret",
        "Keep a team's secrets on the server; jobs name them in env: {secret: S, key: K}.",
    ),
    "queue": Lazy(
        "trainfleet.cli.queue_commands:queue",
        "Create, list and describe the queues jobs wait in (quota, cohort, borrowing).",
    ),
    "export": Lazy(
        "trainfleet.cli.tool_commands:export",
        "Print JOB_FILE as the manifest that runs it on Kubernetes (kubectl apply -f -).",
    ),
    "schema": Lazy(
        "trainfleet.cli.tool_commands:schema", "Print the JSON Schema of job files (for editors)."
    ),
    "tf-server": Lazy(
        "trainfleet.cli.tool_commands:tf_server",
        "A TensorFlow gRPC server that joins the cluster in TF_CONFIG.",
    ),
}
"""Every command but ``server``: where it is defined, and its short help for ``--help``
(the first paragraph of its docstring; a test holds them equal)."""


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
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
