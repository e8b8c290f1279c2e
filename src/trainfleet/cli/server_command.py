"""``trainfleet server``: its flags resolved into the settings, the engine built by the
assembly, then served (the one CLI module that imports ``server/``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click
from click.core import ParameterSource

from trainfleet.control.settings import Setting, Settings, Source


@click.command()
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
    "--usage-interval",
    envvar="TRAINFLEET_USAGE_INTERVAL",
    metavar="SECONDS",
    help="Seconds between two samples of each task's CPU, memory and GPU use, kept beside "
    "its log (0: none) [default: TRAINFLEET_USAGE_INTERVAL, else 5].",
)
@click.option(
    "--gpu-sharing",
    envvar="TRAINFLEET_GPU_SHARING",
    type=click.Choice(["mps", "counted"]),
    help="How tasks of a fraction of a GPU (gpu: 0.5) share it: mps (each held to its share "
    "of memory and SMs by NVIDIA MPS) or counted (shared, not enforced) [default: "
    "TRAINFLEET_GPU_SHARING, else mps where nvidia-cuda-mps-control is installed, else "
    "fractions are refused].",
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
    "team_accounts",
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
@click.option(
    "--api-process/--one-process",
    default=True,
    envvar="TRAINFLEET_API_PROCESS",
    help="Serve the API from a process of its own beside the engine's, so that a burst of "
    "submissions delays no job's start; or both from one process (fewer threads and less "
    "memory, slower under load; see docs/api-process.md) [default: TRAINFLEET_API_PROCESS "
    "(0: one process), else --api-process].",
)
@click.pass_context
def server(ctx: click.Context, /, **_: object) -> None:
    """Serve the REST API and run submitted jobs (stop with Ctrl-C).

    On the first start it prints an admin token once, or takes TRAINFLEET_ADMIN_TOKEN.
    Jobs keep running while the server is stopped or restarted; it adopts them again.
    Tokens travel in every request: beyond this machine (--host other than 127.0.0.1),
    serve HTTPS with --tls-cert and --tls-key; clients trust the certificate through
    --ca-cert or TRAINFLEET_CA_CERT unless a CA they already trust signed it.
    A notebook job's notebook is given the server's address (loopback, this machine's
    name over HTTPS, or kubernetes.server_url), TRAINFLEET_CA_CERT's file over HTTPS,
    and a token of its owner that is revoked when the job ends.
    """
    from trainfleet.domain.errors import TrainfleetError

    try:
        _serve(Settings.resolve(**dict(given(ctx))))
    except (TrainfleetError, ValueError, OSError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)


def _serve(settings: Settings) -> None:
    """Check the server's own flags, build the engine (``control.assembly``), serve it."""
    from trainfleet.control.assembly import server_engine
    from trainfleet.server import settings as server_settings
    from trainfleet.server.host_paths import HostPaths
    from trainfleet.server.serve import audit_retention_of, serve, tls_of
    from trainfleet.spec.loading import load_queues_file

    retention = audit_retention_of(settings.text("audit_retention"))
    tls = tls_of(settings.text("tls_cert"), settings.text("tls_key"))
    settings.database_url()  # a bad one is named before anything is built
    queues_file = settings.text("queues_file")
    queues = load_queues_file(queues_file) if queues_file else None
    max_workdir = settings.text("max_workdir")
    limits = {name: settings.value(name) for name in ("max_body", "max_roles", "max_tasks")}
    limits["max_workdir"] = size_setting(max_workdir, "--max-workdir") if max_workdir else None
    isolating = settings.value("isolate_teams") or settings.value("team_accounts")
    allow_paths = settings.value("allow_paths")
    allowed = [Path(path) for path in allow_paths] if allow_paths or isolating else None
    http = server_settings.Settings(
        workdir=Path.cwd(),
        host_paths=HostPaths(allowed),
        audit_retention=retention,
        **{name: value for name, value in limits.items() if value is not None},
    )
    engine = server_engine(settings)
    serve(
        engine,
        settings.value("host"),
        settings.value("port"),
        http,
        queues,
        tls,
        admin_token=settings.text("admin_token"),
        apart=bool(settings.value("api_process")),
    )


def given(ctx: click.Context) -> Iterator[tuple[str, Setting]]:
    """Each flag of the command, and the group's ``--data-dir``, with where click found
    it: on the command line, in its variable (``envvar``), or its default."""
    for name in ("data_dir", "backend"):  # the group's
        if ctx.parent is not None and name in ctx.parent.params:
            yield name, _setting(ctx.parent, name)
    for name in ctx.params:
        yield name, _setting(ctx, name)


def _setting(ctx: click.Context, name: str) -> Setting:
    param = next(param for param in ctx.command.params if param.name == name)
    value, flag = ctx.params[name], param.opts[0]
    source = ctx.get_parameter_source(name)
    if source is ParameterSource.COMMANDLINE:
        return Setting(value, Source.FLAG, flag)
    if source is ParameterSource.ENVIRONMENT and isinstance(param.envvar, str):
        return Setting(value, Source.ENV, param.envvar)
    return Setting(value, Source.DEFAULT, flag)


def size_setting(value: str, source: str) -> int:
    """Bytes in a size flag's ``value`` (``100Mi``, ``2G``); UserError naming ``source``."""
    from trainfleet.cli.errors import UserError
    from trainfleet.spec import quantity

    try:
        return quantity.size_setting(value, source, 0, minimum=1024)
    except ValueError as error:
        raise UserError(str(error)) from None


@click.command()
@click.option(
    "--port",
    default=0,
    type=click.IntRange(0, 65535),
    help="The port on 127.0.0.1 [default: a free one].",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in your browser.")
@click.pass_context
def ui(ctx: click.Context, /, port: int, open_browser: bool) -> None:
    """Serve the dashboard of this machine's jobs on 127.0.0.1 (stop with Ctrl-C).

    It prints a link that signs one browser in, once (a token made for this run, revoked
    when it ends). The page shows the jobs of the data directory, whoever runs them; jobs
    submitted from it run while this command runs. With a server configured, its own
    dashboard is at the server's address.
    """
    from trainfleet.cli.config import settings_of
    from trainfleet.domain.errors import TrainfleetError

    try:
        settings = settings_of(ctx.obj)
        server = settings.target().server
        if server is not None:
            click.echo(f"error: a server is configured: its dashboard is at {server}/", err=True)
            sys.exit(2)
        from trainfleet.control.assembly import dashboard_engine
        from trainfleet.server.serve import serve_dashboard

        serve_dashboard(dashboard_engine(settings), port, click.launch if open_browser else None)
    except KeyboardInterrupt:  # Ctrl-C: the way it ends (uvicorn raises it again once done)
        return
    except (TrainfleetError, ValueError, OSError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
