"""What each CLI command does, in terms of the engine's service functions."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from trainfleet.backends.local.gpus import GpuConfigError
from trainfleet.cli.follow import LogFollower
from trainfleet.control.engine import Engine, JobActive, JobNotFound
from trainfleet.scheduling.placement import Unschedulable
from trainfleet.spec.errors import SpecError
from trainfleet.spec.loading import LoadedJob, load_job_file
from trainfleet.spec.submarine import SubmarineArgs, from_submarine_args
from trainfleet.store.layout import DataDir
from trainfleet.store.records import State

USAGE_ERROR = 2


class UserError(Exception):
    """Bad input: printed as one message, exit code 2."""


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn every kind of bad input into ``error: ...`` on stderr and exit code 2."""
    try:
        yield
    except (SpecError, Unschedulable, JobNotFound, JobActive, GpuConfigError, UserError) as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(USAGE_ERROR)


def _engine(data_dir: str | None) -> Engine:
    return Engine(DataDir.resolve(data_dir))


def _load(job_file: str | None, submarine: SubmarineArgs | None) -> tuple[LoadedJob, Path]:
    if job_file and submarine:
        raise UserError("give a job file or Submarine-style flags, not both")
    if submarine:
        return from_submarine_args(submarine), Path.cwd()
    if not job_file:
        raise UserError("missing JOB_FILE (or Submarine-style flags such as --num_workers)")
    return load_job_file(job_file), Path(job_file).resolve().parent


def run(
    data_dir: str | None, job_file: str | None, submarine: SubmarineArgs | None, dry_run: bool
) -> int:
    """``trainfleet run``: the job's exit code (0 succeeded, 1 failed, 130 cancelled)."""
    with user_errors():
        loaded, workdir = _load(job_file, submarine)
        for warning in loaded.warnings:
            click.echo(f"warning: {warning}", err=True)
        engine = _engine(data_dir)
        if dry_run:
            from trainfleet.cli import tables

            tables.print_dry_run(loaded.spec, engine.dry_run(loaded.spec, workdir))
            return 0
        job = engine.submit(loaded.spec, workdir, loaded.source)
    from trainfleet.cli.run_view import RunView

    return RunView(engine, job.id).run()


def list_jobs(data_dir: str | None, limit: int, output: str) -> None:
    jobs = _engine(data_dir).list(limit)
    if output == "table":
        from trainfleet.cli import tables

        tables.print_jobs(jobs)
    else:
        _dump([job.model_dump(exclude={"spec"}) for job in jobs], output)


def describe(data_dir: str | None, job_id: str, output: str) -> int:
    with user_errors():
        details = _engine(data_dir).describe(job_id)
    if output == "table":
        from trainfleet.cli import tables

        tables.print_details(details)
    else:
        _dump(
            {
                "job": details.job.model_dump() | {"spec": json.loads(details.job.spec)},
                "tasks": [task.model_dump() for task in details.tasks],
                "events": [event.model_dump() for event in details.events],
            },
            output,
        )
    return 0


def logs(
    data_dir: str | None, job_id: str, role: str | None, index: int | None, follow: bool
) -> int:
    with user_errors():
        engine = _engine(data_dir)
        tasks = engine.tasks(job_id)
        if index is not None and role is None:
            raise UserError("--index needs --role")
        chosen = [t for t in tasks if role in (None, t.role) and index in (None, t.index)]
        if not chosen:
            names = ", ".join(dict.fromkeys(t.role for t in tasks))
            which = f"{role}/{index}" if index is not None else str(role)
            raise UserError(f"job {job_id} has no task {which} (roles: {names})")
    follower = LogFollower(engine, job_id, [(t.role, t.index) for t in chosen])
    out = sys.stdout.buffer
    while follow and not State(engine.get(job_id).state).is_final:
        out.writelines(follower.read())
        out.flush()
        time.sleep(0.2)
    out.writelines(follower.read(final=True))
    out.flush()
    return 0


def events(data_dir: str | None, job_id: str, follow: bool, output: str) -> int:
    """``trainfleet events``: one line (or JSON/YAML object) per event, oldest first."""
    from trainfleet.cli.follow import EventFollower, describe_event

    with user_errors():
        engine = _engine(data_dir)
        engine.get(job_id)
    follower = EventFollower(engine, job_id)
    while True:
        # Look at the state before reading, so the events of a job's end are all printed.
        ended = not follow or State(engine.get(job_id).state).is_final
        for event in follower.read():
            if output == "json":
                click.echo(event.model_dump_json())  # one object a line, for streaming
            elif output == "yaml":
                _dump(event.model_dump(), "yaml")
                click.echo("---")
            else:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.time))
                click.echo(f"{stamp}  {describe_event(event)}")
        if ended:
            return 0
        time.sleep(0.2)


def stop(data_dir: str | None, job_id: str) -> int:
    """``trainfleet stop``: cancel a job that has not ended."""
    with user_errors():
        job = _engine(data_dir).cancel(job_id)
    click.echo(f"job {job.id} {job.state}" + (f": {job.reason}" if job.reason else ""))
    return 0


def delete(data_dir: str | None, job_id: str, force: bool) -> int:
    """``trainfleet delete``: forget a job and its logs."""
    with user_errors():
        _engine(data_dir).delete(job_id, force=force)
    click.echo(f"job {job_id} deleted")
    return 0


def _dump(data: object, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
