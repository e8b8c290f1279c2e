"""What ``trainfleet top`` does, written once against ``JobReader`` (embedded or remote)."""

from __future__ import annotations

import time

import click

from trainfleet.cli.commands import reader_of
from trainfleet.cli.options import Options
from trainfleet.cli.service import JobReader
from trainfleet.wire import JobUsage

RUNNING_JOBS = 50
"""Most running jobs shown without a JOB_ID (the newest)."""


def top(options: Options, job_id: str | None, watch: float | None, output: str) -> int:
    """Print the use of ``job_id``'s tasks (or of every running task), once or every
    ``watch`` seconds until Ctrl-C; exit 2 for a job that does not exist."""
    from rich.console import Console

    from trainfleet.cli import usage_view

    console = Console(highlight=False)
    with reader_of(options) as service:
        while True:
            jobs = _usage(service, job_id, history=output == "json")
            if output == "json":
                click.echo(_json(jobs))
            else:
                console.print(usage_view.table(jobs, running_only=job_id is None))
            if watch is None:
                return 0
            try:
                time.sleep(watch)
            except KeyboardInterrupt:
                return 0
            if output == "table":
                console.clear()


def _usage(service: JobReader, job_id: str | None, history: bool) -> list[JobUsage]:
    if job_id is not None:
        return [service.usage(job_id, history=history)]
    running = service.find(state="running", name=None, user=None, labels={}, limit=RUNNING_JOBS)
    return [service.usage(job.id, history=history) for job in running]


def _json(jobs: list[JobUsage]) -> str:
    import json

    return json.dumps([job.model_dump(mode="json") for job in jobs], indent=2)
