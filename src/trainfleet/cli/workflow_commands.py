"""``trainfleet workflow run FILE``: a workflow's steps as jobs on this machine, in the
foreground, each started as soon as its needs allow (``workflows.plan``)."""

from __future__ import annotations

import secrets
import sys
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import click

from trainfleet.cli.options import Options

if TYPE_CHECKING:
    from trainfleet.cli.service import JobService
    from trainfleet.domain.records import JobRecord
    from trainfleet.spec.models import JobSpec


@click.group()
def workflow() -> None:
    """Run workflows: named steps, each a job, in the order their needs allow."""


@workflow.command("run")
@click.argument("workflow_file", type=click.Path(dir_okay=False))
@click.option(
    "--param", "params", multiple=True, metavar="NAME=VALUE", help="A parameter (repeat)."
)
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
    from trainfleet.workflows.run import run_workflow
    from trainfleet.workflows.steps import parameters_of

    with commands.user_errors():
        given = commands.key_values(params, "--param", "NAME")
        spec = load_workflow_text(read_job_text(workflow_file), workflow_file)
        parameters = parameters_of(spec, given)
        with closing(embedded(options)) as service:
            assert isinstance(service, EngineService)
            run_id = f"{spec.name}-{secrets.token_hex(4)}"
            run_dir = service.engine.data_dir.root / "workflows" / run_id
            click.echo(f"workflow {spec.name}: run {run_id}")
            outcome = run_workflow(
                _Steps(service),
                spec,
                Path(workflow_file).resolve().parent,
                parameters,
                run_dir,
                say=lambda line: click.echo(f"{run_id} | {line}"),
            )
    verdict = "succeeded" if outcome.succeeded else "failed"
    click.echo(
        f"workflow {spec.name} {verdict}: "
        + ", ".join(f"{name} {state}" for name, state in outcome.states.items())
    )
    sys.exit(0 if outcome.succeeded else 1)


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
