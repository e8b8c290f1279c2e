"""Tables for people: jobs, tasks, events and dry runs, rendered with Rich."""

from __future__ import annotations

import datetime
import json
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainfleet.domain.records import (
    CheckpointStep,
    JobDetails,
    JobRecord,
    OutputFile,
    State,
    TaskRecord,
)

if TYPE_CHECKING:
    from trainfleet.control.dry_run import DryRun
    from trainfleet.spec.models import JobSpec
    from trainfleet.wire import JobUsage

STATE_STYLES = {
    State.QUEUED: "dim",
    State.STARTING: "cyan",
    State.RUNNING: "green",
    State.RESTARTING: "yellow",
    State.SUCCEEDED: "bold green",
    State.FAILED: "bold red",
    State.CANCELLED: "magenta",
}

console = Console(highlight=False)


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


def _state(state: str) -> str:
    style = STATE_STYLES.get(State(state), "")
    return f"[{style}]{state}[/]" if style else state


def _why(job: JobRecord) -> str:
    """Why the job is where it is: why it waits while it does, else its state's reason."""
    return job.waiting if job.waiting_code else job.reason


def task_table(tasks: Sequence[TaskRecord]) -> Table:
    """Role, index, state, pid, restarts, address, exit code, code and reason of every task."""
    table = Table(box=None, pad_edge=False)
    columns = ("TASK", "STATE", "PID", "RESTARTS", "ADDRESS", "GPUS", "EXIT", "CODE", "REASON")
    for column in columns:
        table.add_column(column)
    for task in tasks:
        table.add_row(
            task.name,
            _state(task.state),
            str(task.pid or "-"),
            str(task.restarts),
            task.address,
            task.gpus or "-",
            "-" if task.exit_code is None else str(task.exit_code),
            task.code or "-",
            escape(task.reason),
        )
    return table


def print_jobs(jobs: Sequence[JobRecord]) -> None:
    table = Table(box=None, pad_edge=False)
    for column in ("JOB", "STATE", "FRAMEWORK", "USER", "CREATED", "REASON"):
        table.add_column(column)
    for job in jobs:
        table.add_row(
            job.id,
            _state(job.state),
            job.framework,
            escape(job.user),
            _when(job.created_at),
            escape(_why(job)),
        )
    console.print(table)


def print_notebooks(rows: Sequence[tuple[JobRecord, str]]) -> None:
    """Notebook jobs, each with the URL it opens at."""
    table = Table(box=None, pad_edge=False)
    for column in ("JOB", "STATE", "USER", "CREATED"):
        table.add_column(column)
    longest = max((len(url) for _, url in rows), default=3)
    table.add_column("URL", no_wrap=True, min_width=longest)  # whole, to be copied
    table.add_column("REASON")
    for job, url in rows:
        table.add_row(
            job.id,
            _state(job.state),
            escape(job.user),
            _when(job.created_at),
            url,
            escape(_why(job)),
        )
    console.print(table)


def print_details(details: JobDetails, usage: JobUsage | None = None) -> None:
    """The job, its tasks (with a line of what each running one uses, from ``usage``) and
    its events."""
    job = details.job
    code = f"({job.code})" if job.code else ""
    console.print(f"[bold]{job.id}[/]  {_state(job.state)} {code}  {escape(job.reason)}")
    if job.waiting_code:
        console.print(escape(f"waiting ({job.waiting_code}): {job.waiting}"), soft_wrap=True)
    spec = json.loads(job.spec)
    console.print(
        escape(
            f"framework {job.framework}, source {job.source}, user {job.user or '-'}, "
            f"dir {job.workdir}"
        ),
        soft_wrap=True,
    )
    console.print(f"queue {spec.get('queue', 'default')}, priority {spec.get('priority', 0)}")
    times = (_when(job.created_at), _when(job.started_at), _when(job.finished_at))
    console.print("created {}, started {}, finished {}".format(*times))
    if details.checkpoints:
        newest = details.checkpoints[-1]
        console.print(
            escape(
                f"checkpoint: step {newest.step} ({_when(newest.committed_at)}), "
                f"{len(details.checkpoints)} kept, {newest.path}"
            ),
            soft_wrap=True,
        )
    console.print()
    console.print(task_table(details.tasks))
    lines = [task for task in usage.tasks if task.current is not None] if usage else []
    if lines:
        from trainfleet.cli.usage_view import line

        console.print()
        for task in lines:
            console.print(escape(line(task)), soft_wrap=True)
    console.print()
    events = Table(box=None, pad_edge=False)
    for column in ("TIME", "WHAT", "STATE", "CODE", "MESSAGE"):
        events.add_column(column)
    for event in details.events:
        events.add_row(
            _when(event.time),
            event.task or "job",
            _state(event.state),
            event.code or "-",
            escape(event.message),
        )
    console.print(events)


def print_dry_run(spec: JobSpec, preview: DryRun) -> None:
    """The resolved job, each task's command, directory and trainfleet-set environment, and
    what a cluster engine would be given."""
    import os

    import yaml

    console.print(
        yaml.safe_dump(spec.model_dump(mode="json", exclude_defaults=True), sort_keys=False),
        markup=False,
    )
    for task in preview.tasks:
        command = shlex.join(task.argv)
        if task.entrypoint:  # the image's own ENTRYPOINT, given these arguments
            command = f"<ENTRYPOINT of the image> {command}".rstrip()
        place = f"in {task.cwd}" + (f", image {task.image}" if task.image else "")
        where = escape(f"{command}  ({place})")
        console.print(f"[bold]{task.role}/{task.index}[/]  {where}", soft_wrap=True)
        for name, value in sorted(task.env.items()):
            if os.environ.get(name) != value:
                console.print(f"  {name}={value}", soft_wrap=True, markup=False)
    if preview.submission:
        console.print("[bold]submitted as[/]")
        console.print(preview.submission, markup=False, highlight=False, soft_wrap=True, end="")


def print_rows(rows: Sequence[tuple[str, ...]]) -> None:
    """Plain columns, the first row a header, for tables that need no colours."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def print_outputs(outputs: Sequence[OutputFile]) -> None:
    """One row per output of a job, by name."""
    from trainfleet.cli.usage_view import size

    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "SIZE", "MODIFIED"):
        table.add_column(column)
    for output in outputs:
        table.add_row(escape(output.name), size(output.size), _when(output.modified))
    console.print(table)


def print_checkpoints(steps: list[CheckpointStep]) -> None:
    """One row per committed checkpoint, oldest first."""
    table = Table(box=None, pad_edge=False)
    for column in ("STEP", "COMMITTED"):
        table.add_column(column)
    table.add_column("PATH", overflow="fold")
    for step in steps:
        table.add_row(str(step.step), _when(step.committed_at), escape(step.path))
    console.print(table)
