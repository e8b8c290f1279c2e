"""``trainfleet workflow submit|list|describe|runs|show|retry|stop|pause|resume|delete``:
workflows stored on a server and their runs, through the SDK.

A workflow NAME is found in ``--team``, else in the caller's only team (``default`` for an
administrator); a RUN is found by its id alone. The file ``submit`` sends is read and its
steps' jobs built here first, so a mistake is named (file, line, field) before anything is
sent or stored.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from trainfleet.cli.commands import _dump
from trainfleet.cli.errors import UserError
from trainfleet.cli.tables import print_rows

if TYPE_CHECKING:
    from trainfleet.cli.options import Options
    from trainfleet.cli.remote import RemoteService
    from trainfleet.domain.workflow_records import (
        RunDetails,
        RunRecord,
        ScheduleRecord,
        WorkflowDetails,
    )
    from trainfleet.spec.workflows import WorkflowSpec

WHAT = "stored workflows and their runs live"
"""Said where no server is configured (``workflow run FILE`` needs none)."""
CHECK_RUN_DIR = Path("/run-dir-of-the-run")
"""The run's folder the steps' jobs are checked with before ``submit`` (the server's
own is made per run)."""


@contextmanager
def server_of(options: Options) -> Iterator[RemoteService]:
    """The configured server; exit 2 saying so where there is none."""
    from trainfleet.cli.accounts import server_of as account_server

    with account_server(options, WHAT) as server:
        yield server


def team_of(server: RemoteService, team: str | None) -> str:
    """``team``, else the caller's only team (``default`` for an administrator); UserError
    naming ``--team`` where the caller has several or none."""
    if team:
        return team
    me = server.call(server.client.whoami)
    if me.admin:
        return "default"
    teams = sorted(me.teams)
    if len(teams) == 1:
        return teams[0]
    if not teams:
        raise UserError("--team: you are in no team, so no workflow is yours to name")
    raise UserError(
        f"--team: you are in several teams ({', '.join(teams)}): say which the workflow is in"
    )


# -- workflows ---------------------------------------------------------------------------


def submit(
    options: Options,
    path: str,
    params: Mapping[str, str],
    team: str | None,
    run: bool,
    send_folder: bool,
    output: str,
) -> int:
    spec = checked(path, params, send_folder)
    with server_of(options) as server:
        submitted = server.call(
            lambda: server.client.submit_workflow(
                path, params=params, team=team, run=run, send_folder=send_folder
            )
        )
    if output != "table":
        _dump(asdict(submitted), output)
        return 0
    workflow = submitted.workflow
    stored = f"workflow {workflow.name} stored in team {workflow.team}"
    if spec.schedule is not None:
        schedule = f"{spec.schedule.cron} ({spec.schedule.timezone})"
        if submitted.next_times:
            click.echo(f"{stored}, on schedule {schedule}; next runs:")
            for stamp in submitted.next_times:
                click.echo(f"  {utc(stamp)}")
        else:
            click.echo(f"{stored}, its schedule {schedule} paused")
    elif submitted.run is not None:
        click.echo(stored)
        click.echo(f"run {submitted.run.id} started")
    else:
        click.echo(f"{stored} (no run started: --no-run)")
    return 0


def checked(path: str, params: Mapping[str, str], send_folder: bool) -> WorkflowSpec:
    """The workflow file at ``path``, its parameters and its steps' jobs checked here;
    SpecError or BadInput (file, line, field) at the first mistake."""
    from trainfleet.domain.errors import BadInput
    from trainfleet.spec.documents import read_job_text
    from trainfleet.spec.workflows import load_workflow_text
    from trainfleet.workflows.run import step_jobs
    from trainfleet.workflows.steps import parameters_of

    spec = load_workflow_text(read_job_text(path), path)
    values = parameters_of(spec, params)
    if not send_folder:
        for name, step in spec.steps.items():
            if step.file is not None or step.notebook is not None:
                read = step.file or step.notebook
                raise BadInput(
                    f"--no-folder: step {name} reads {read} from the workflow's folder, "
                    "which --no-folder does not send"
                )
    step_jobs(spec, Path(path).resolve().parent, values, CHECK_RUN_DIR)
    return spec


def list_workflows(options: Options, team: str | None, output: str) -> int:
    with server_of(options) as server:
        summaries = server.call(lambda: server.client.workflows(team))
    if output != "table":
        _dump([asdict(summary) for summary in summaries], output)
        return 0
    rows = [("NAME", "TEAM", "OWNER", "SCHEDULE", "STATE", "LAST RUN")]
    for summary in summaries:
        workflow, last = summary.workflow, summary.last_run
        rows.append(
            (
                workflow.name,
                workflow.team,
                workflow.user,
                _cron(summary.schedule),
                _schedule_state(summary.schedule),
                _last_run([last] if last is not None else []),
            )
        )
    print_rows(rows)
    return 0


def describe(options: Options, name: str, team: str | None, output: str) -> int:
    with server_of(options) as server:
        chosen = team_of(server, team)
        details = server.call(lambda: server.client.workflow(chosen, name))
    if output != "table":
        _dump(asdict(details), output)
        return 0
    _show_workflow(details)
    return 0


def runs(options: Options, name: str, team: str | None, limit: int, output: str) -> int:
    with server_of(options) as server:
        chosen = team_of(server, team)
        found = server.call(lambda: server.client.workflow_runs(chosen, name, limit))
    if output != "table":
        _dump([asdict(run) for run in found], output)
        return 0
    _show_runs(found)
    return 0


def start(
    options: Options, name: str, team: str | None, params: Mapping[str, str], output: str
) -> int:
    with server_of(options) as server:
        chosen = team_of(server, team)
        run = server.call(lambda: server.client.run_workflow(chosen, name, params))
        details = server.call(lambda: server.client.workflow_run(run.id))
    _show_run(details, output)
    return 0


def pause(options: Options, name: str, team: str | None) -> int:
    with server_of(options) as server:
        chosen = team_of(server, team)
        details = server.call(lambda: server.client.pause_workflow(chosen, name))
    reason = details.schedule.reason if details.schedule else ""
    click.echo(f"workflow {name} of team {chosen} paused" + (f" ({reason})" if reason else ""))
    return 0


def resume(options: Options, name: str, team: str | None) -> int:
    with server_of(options) as server:
        chosen = team_of(server, team)
        details = server.call(lambda: server.client.resume_workflow(chosen, name))
    click.echo(f"workflow {name} of team {chosen} resumed; next runs: {_times(details)}")
    return 0


def delete(options: Options, name: str, team: str | None) -> int:
    with server_of(options) as server:
        chosen = team_of(server, team)
        server.call(lambda: server.client.delete_workflow(chosen, name))
    click.echo(f"workflow {name} of team {chosen} deleted, with its runs (their jobs stay)")
    return 0


# -- runs --------------------------------------------------------------------------------


def show(options: Options, run_id: str, output: str) -> int:
    with server_of(options) as server:
        details = server.call(lambda: server.client.workflow_run(run_id))
    _show_run(details, output)
    return 0


def stop(options: Options, run_id: str, output: str) -> int:
    with server_of(options) as server:
        details = server.call(lambda: server.client.stop_run(run_id))
    _show_run(details, output)
    return 0


def retry(options: Options, run_id: str, start_from: str | None, output: str) -> int:
    with server_of(options) as server:
        details = server.call(lambda: server.client.retry_run(run_id, start_from))
    _show_run(details, output)
    return 0


# -- showing -----------------------------------------------------------------------------


def utc(stamp: float) -> str:
    """A time as UTC ISO 8601: ``2027-01-01T00:00:00Z``."""
    when = datetime.datetime.fromtimestamp(stamp, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def _cron(schedule: ScheduleRecord | None) -> str:
    return "-" if schedule is None else f"{schedule.cron} ({schedule.timezone})"


def _schedule_state(schedule: ScheduleRecord | None) -> str:
    if schedule is None:
        return "-"
    return "paused" if schedule.paused else "active"


def _schedule_code(schedule: ScheduleRecord | None) -> str:
    if schedule is None:
        return "-"
    return f"{schedule.code}: {schedule.reason}" if schedule.reason else str(schedule.code)


def _times(details: WorkflowDetails) -> str:
    return ", ".join(utc(stamp) for stamp in details.next_times) or "-"


def _last_run(found: Sequence[RunRecord]) -> str:
    if not found:
        return "-"
    latest = max(found, key=lambda run: run.number)
    return f"#{latest.number} {latest.state}"


def _show_workflow(details: WorkflowDetails) -> None:
    workflow = details.workflow
    rows = [
        ("name:", workflow.name),
        ("team:", workflow.team),
        ("owner:", workflow.user),
        ("file:", workflow.filename),
        ("schedule:", _cron(details.schedule)),
        ("state:", _schedule_state(details.schedule)),
        ("code:", _schedule_code(details.schedule)),
        ("next runs:", _times(details)),
    ]
    print_rows(rows)
    click.echo("")
    _show_runs(details.runs)


def _show_runs(found: Sequence[RunRecord]) -> None:
    if not found:
        click.echo("no runs")
        return
    rows = [("#", "RUN", "STATE", "CODE", "REASON", "STARTED", "FINISHED")] + [
        (
            str(run.number),
            run.id,
            str(run.state),
            str(run.code),
            run.reason or "-",
            _when(run.started_at),
            _when(run.finished_at),
        )
        for run in found
    ]
    print_rows(rows)


def _show_run(details: RunDetails, output: str) -> None:
    if output != "table":
        _dump(asdict(details), output)
        return
    run = details.run
    parameters = ", ".join(f"{key}={value}" for key, value in run.parameters.items())
    print_rows(
        [
            ("run:", run.id),
            ("workflow:", f"{run.workflow} #{run.number} (team {run.team}, owner {run.user})"),
            ("state:", f"{run.state} ({run.code}{': ' + run.reason if run.reason else ''})"),
            ("parameters:", parameters or "-"),
            ("started:", _when(run.started_at)),
            ("finished:", _when(run.finished_at)),
        ]
    )
    click.echo("")
    rows = [("STEP", "STATE", "TRIES", "JOB", "REASON")] + [
        (step.step, str(step.state), str(step.tries), step.job_id or "-", step.reason or "-")
        for step in details.steps
    ]
    print_rows(rows)
