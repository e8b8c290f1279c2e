"""The ``trainfleet`` command: its global options, and each command imported only when it is
run or its help is shown (``COMMANDS``), so that ``--help`` and ``run`` start fast."""

from __future__ import annotations

import sys

import click

from trainfleet.cli.lazy import Lazy, LazyGroup
from trainfleet.cli.options import Options
from trainfleet.process_exit import run_and_exit

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
    "checkpoints": Lazy(
        "trainfleet.cli.job_commands:checkpoints",
        "List a job's committed checkpoints (trainfleet.checkpoint's steps), oldest first.",
    ),
    "top": Lazy(
        "trainfleet.cli.usage_commands:top",
        "Show what running tasks use: CPU, memory, GPU and GPU memory.",
    ),
    "tensorboard": Lazy(
        "trainfleet.cli.tensorboard_commands:tensorboard",
        "Open one TensorBoard over several jobs' event folders.",
    ),
    "notebook": Lazy(
        "trainfleet.cli.notebook_commands:notebook",
        "Start, list and stop JupyterLab notebooks (jobs, admitted by queues like any).",
    ),
    "workflow": Lazy(
        "trainfleet.cli.workflow_commands:workflow",
        "Run workflows: named steps, each a job, in the order their needs allow.",
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
    "gpus": Lazy(
        "trainfleet.cli.gpu_commands:gpus",
        "List the GPUs jobs are placed on (this machine's, or the server's): model, memory, "
        "utilisation, temperature, health and the tasks holding each (job/role/index, share).",
    ),
    "export": Lazy(
        "trainfleet.cli.tool_commands:export",
        "Print JOB_FILE as the manifest that runs it on Kubernetes (kubectl apply -f -).",
    ),
    "schema": Lazy(
        "trainfleet.cli.tool_commands:schema", "Print the JSON Schema of job files (for editors)."
    ),
    "server": Lazy(
        "trainfleet.cli.server_command:server",
        "Serve the REST API and run submitted jobs (stop with Ctrl-C).",
    ),
    "ui": Lazy(
        "trainfleet.cli.server_command:ui",
        "Serve the dashboard of this machine's jobs on 127.0.0.1 (stop with Ctrl-C).",
    ),
    "tf-server": Lazy(
        "trainfleet.cli.tool_commands:tf_server",
        "A TensorFlow gRPC server that joins the cluster in TF_CONFIG.",
    ),
}
"""Every command: where it is defined, and its short help for ``--help``
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
@click.option(
    "--backend",
    metavar="NAME",
    help="Where this machine's engine runs jobs: local, slurm or kubernetes [default: "
    "TRAINFLEET_BACKEND, then 'backend' in the config file; none: local].",
)
@click.version_option(package_name="trainfleet")
@click.pass_context
def cli(
    ctx: click.Context,
    data_dir: str | None,
    server: str | None,
    ca_cert: str | None,
    backend: str | None,
) -> None:
    """Run distributed deep-learning training jobs with one command.

    Without a server, jobs run on this machine (the engine is embedded); with one, every
    job command goes to the server, authenticated by TRAINFLEET_TOKEN (or 'token' in the
    config file).
    """
    ctx.obj = Options(data_dir, server, ca_cert, backend)


def main() -> None:
    try:
        cli(prog_name="trainfleet")
    except KeyboardInterrupt:
        sys.exit(130)  # Ctrl-C in a command that does not handle it: no traceback


if __name__ == "__main__":
    run_and_exit(main)
