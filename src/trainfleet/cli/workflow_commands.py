"""``trainfleet workflow``: ``run FILE`` runs a workflow's steps as jobs on this machine, in
the foreground, each started as soon as its needs allow (``workflows.plan``); the other
commands store workflows on a server and follow their runs there (``cli.workflows``)."""

from __future__ import annotations

import secrets
import sys
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import click

from trainfleet.cli.options import OUTPUT, Options

if TYPE_CHECKING:
    from trainfleet.cli.service import JobService
    from trainfleet.domain.records import JobRecord
    from trainfleet.spec.models import JobSpec


@click.group()
def workflow() -> None:
    """Run workflows: named steps, each a job, in the order their needs allow.

    "workflow run FILE" runs one here, in the foreground; the other commands store workflows
    on a server (--server or TRAINFLEET_SERVER), which runs them and fires their schedules."""


PARAM = click.option(
    "--param", "params", multiple=True, metavar="NAME=VALUE", help="A parameter (repeat)."
)
TEAM = click.option(
    "--team", help="The workflow's team (default: your only team; default for an administrator)."
)


@workflow.command("run")
@click.argument("workflow_file", type=click.Path(dir_okay=False))
@PARAM
@click.pass_obj
def run(options: Options, /, workflow_file: str, params: tuple[str, ...]) -> None:
    """Run WORKFLOW_FILE here until every step it calls for has ended (no server); its
    steps run in the file's folder and share a folder of the run ($TRAINFLEET_RUN_DIR).
    Exits 0 when no step failed, 1 otherwise; Ctrl-C stops the running steps."""
    from trainfleet.cli import commands
    from trainfleet.cli.embedded import EngineService
    from trainfleet.cli.factory import embedded
    from trainfleet.spec.documents import read_job_text
    from trainfleet.spec.workflows import load_workflow_text
    from trainfleet.workflows.run import run_workflow, step_jobs
    from trainfleet.workflows.steps import parameters_of

    with commands.user_errors():
        given = commands.key_values(params, "--param", "NAME")
        spec = load_workflow_text(read_job_text(workflow_file), workflow_file)
        parameters = parameters_of(spec, given)
        folder = Path(workflow_file).resolve().parent
        with closing(embedded(options)) as service:
            assert isinstance(service, EngineService)
            run_id = f"{spec.name}-{secrets.token_hex(4)}"
            run_dir = service.engine.data_dir.root / "workflows" / run_id
            jobs = step_jobs(spec, folder, parameters, run_dir)  # all, before any starts
            click.echo(f"workflow {spec.name}: run {run_id}")
            outcome = run_workflow(
                _Steps(service),
                spec,
                jobs,
                folder,
                run_dir,
                say=lambda line: click.echo(f"{run_id} | {line}"),
            )
    verdict = "succeeded" if outcome.succeeded else "failed"
    click.echo(
        f"workflow {spec.name} {verdict}: "
        + ", ".join(f"{name} {state}" for name, state in outcome.states.items())
    )
    sys.exit(0 if outcome.succeeded else 1)


@workflow.command("submit")
@click.argument("workflow_file", type=click.Path(dir_okay=False))
@PARAM
@TEAM
@click.option("--no-run", is_flag=True, help="Store it only (a workflow without a schedule).")
@click.option(
    "--no-folder",
    is_flag=True,
    help="Send no folder with it: its steps start in empty folders (inline steps only).",
)
@OUTPUT
@click.pass_obj
def submit(
    options: Options,
    /,
    workflow_file: str,
    params: tuple[str, ...],
    team: str | None,
    no_run: bool,
    no_folder: bool,
    output: str,
) -> None:
    """Store WORKFLOW_FILE on the server with its folder (replacing the workflow of its
    name); without a schedule a run of it starts at once, with a schedule its next run
    times are shown (UTC)."""
    from trainfleet.cli import commands, workflows

    with commands.user_errors():
        given = commands.key_values(params, "--param", "NAME")
        sys.exit(
            workflows.submit(options, workflow_file, given, team, not no_run, not no_folder, output)
        )


@workflow.command("list")
@TEAM
@OUTPUT
@click.pass_obj
def list_workflows(options: Options, /, team: str | None, output: str) -> None:
    """List the workflows of your teams: schedule, its state and the latest run."""
    from trainfleet.cli import workflows

    sys.exit(workflows.list_workflows(options, team, output))


@workflow.command("describe")
@click.argument("name")
@TEAM
@OUTPUT
@click.pass_obj
def describe(options: Options, /, name: str, team: str | None, output: str) -> None:
    """Show workflow NAME: its schedule's state and code, next run times, latest runs."""
    from trainfleet.cli import workflows

    sys.exit(workflows.describe(options, name, team, output))


@workflow.command("runs")
@click.argument("name")
@TEAM
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@OUTPUT
@click.pass_obj
def runs(options: Options, /, name: str, team: str | None, limit: int, output: str) -> None:
    """List the runs of workflow NAME, newest first."""
    from trainfleet.cli import workflows

    sys.exit(workflows.runs(options, name, team, limit, output))


@workflow.command("show")
@click.argument("run_id", metavar="RUN")
@OUTPUT
@click.pass_obj
def show(options: Options, /, run_id: str, output: str) -> None:
    """Show run RUN and each of its steps: state, tries, job."""
    from trainfleet.cli import workflows

    sys.exit(workflows.show(options, run_id, output))


@workflow.command("retry")
@click.argument("run_id", metavar="RUN")
@click.option("--from", "start_from", metavar="STEP", help="Run STEP and every step after it.")
@OUTPUT
@click.pass_obj
def retry(options: Options, /, run_id: str, start_from: str | None, output: str) -> None:
    """Run again the failed steps of ended run RUN and those they held back (or --from a
    step); shows the run after."""
    from trainfleet.cli import workflows

    sys.exit(workflows.retry(options, run_id, start_from, output))


@workflow.command("stop")
@click.argument("run_id", metavar="RUN")
@OUTPUT
@click.pass_obj
def stop(options: Options, /, run_id: str, output: str) -> None:
    """Stop run RUN and its steps' jobs; shows the run after."""
    from trainfleet.cli import workflows

    sys.exit(workflows.stop(options, run_id, output))


@workflow.command("start")
@click.argument("name")
@TEAM
@PARAM
@OUTPUT
@click.pass_obj
def start(
    options: Options, /, name: str, team: str | None, params: tuple[str, ...], output: str
) -> None:
    """Start a run of stored workflow NAME now (its schedule, if any, fires on as before),
    from the file and folder it was last submitted with; shows the run."""
    from trainfleet.cli import commands, workflows

    with commands.user_errors():
        given = commands.key_values(params, "--param", "NAME")
        sys.exit(workflows.start(options, name, team, given, output))


@workflow.command("pause")
@click.argument("name")
@TEAM
@click.pass_obj
def pause(options: Options, /, name: str, team: str | None) -> None:
    """Stop firing the schedule of workflow NAME (its running runs go on)."""
    from trainfleet.cli import workflows

    sys.exit(workflows.pause(options, name, team))


@workflow.command("resume")
@click.argument("name")
@TEAM
@click.pass_obj
def resume(options: Options, /, name: str, team: str | None) -> None:
    """Fire the schedule of workflow NAME again, from its next time (none missed is run)."""
    from trainfleet.cli import workflows

    sys.exit(workflows.resume(options, name, team))


@workflow.command("delete")
@click.argument("name")
@TEAM
@click.pass_obj
def delete(options: Options, /, name: str, team: str | None) -> None:
    """Delete workflow NAME, its schedule and its runs (stopping those running; the steps'
    jobs stay)."""
    from trainfleet.cli import workflows

    sys.exit(workflows.delete(options, name, team))


class _Steps:
    """The steps' jobs on the embedded engine, each in a runner process of its own."""

    def __init__(self, service: JobService) -> None:
        self.service = service

    def submit_step(self, spec: JobSpec, folder: Path) -> str:
        from trainfleet.cli.service import JobInput

        return self.service.submit(JobInput(spec=spec, workdir=str(folder)), detach=True).id

    def get(self, job_id: str) -> JobRecord:
        return self.service.get(job_id)

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:
        return self.service.cancel(job_id, reason)
