"""What each CLI command does, written once against ``JobService`` (embedded or remote)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from trainfleet.cli.errors import UserError
from trainfleet.cli.factory import embedded, open_reader, open_service
from trainfleet.cli.options import Options
from trainfleet.cli.service import JobInput, JobReader, JobService
from trainfleet.datadir.follow import LogFollower
from trainfleet.domain.errors import TrainfleetError
from trainfleet.domain.records import JobRecord, State

if TYPE_CHECKING:
    from trainfleet.wire import QueueState

FOLLOW_SECONDS = 0.2
"""Seconds between two looks at a followed job's logs or events (at least)."""


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn every failure trainfleet names into ``error: ...`` on stderr and its exit code."""
    try:
        yield
    except TrainfleetError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)


@contextmanager
def service_of(options: Options) -> Iterator[JobService]:
    """The configured service, closed afterwards; its errors become messages."""
    with user_errors(), closing(open_service(options)) as service:
        yield service


@contextmanager
def reader_of(options: Options) -> Iterator[JobReader]:
    """Like ``service_of``, for the commands that only read."""
    with user_errors(), closing(open_reader(options)) as service:
        yield service


def submit(options: Options, job: JobInput, output: str) -> int:
    """``trainfleet submit``: store the job, start it in the background, print its id."""
    with service_of(options) as service:
        record = service.submit(job, detach=True)
    _show_job(record, output, record.id)
    return 0


def run(options: Options, job: JobInput, dry_run: bool) -> int:
    """``trainfleet run``: the job's exit code (0 succeeded, 1 failed, 130 cancelled)."""
    if dry_run:
        return _dry_run(options, job)
    from trainfleet.cli.run_view import RunView

    with service_of(options) as service:
        record = service.submit(job, detach=False)
        return RunView(service, record.id).run()


def _dry_run(options: Options, job: JobInput) -> int:
    """What would run on this machine (always the embedded engine: nothing is stored)."""
    from trainfleet.cli import tables
    from trainfleet.cli.config import settings_of
    from trainfleet.cli.embedded import EngineService, load
    from trainfleet.control.dry_run import dry_run

    with user_errors():
        loaded, folder = load(job)
        service = EngineService.of(settings_of(options))
        try:
            preview = dry_run(service.engine, loaded.spec, folder)
        finally:
            service.close()
    tables.print_dry_run(loaded.spec, preview)
    return 0


def run_stored(options: Options, job_id: str) -> int:
    """The background runner of an embedded ``submit``: runs the stored job to its end."""
    from trainfleet.cli.run_view import EXIT_CODES, RunView

    with user_errors():
        service = embedded(options)
        try:
            job = service.get(job_id)
            if State(job.state) != State.QUEUED:  # stopped before it could start
                return EXIT_CODES.get(State(job.state), 1)
            return RunView(service, job_id, show_logs=False).run()
        finally:
            service.close()


def list_jobs(
    options: Options,
    output: str,
    limit: int,
    state: str | None = None,
    name: str | None = None,
    user: str | None = None,
    labels: tuple[str, ...] = (),
    team: str | None = None,
    queue: str | None = None,
) -> int:
    """``trainfleet list``: matching jobs, newest first."""
    with reader_of(options) as service:
        wanted = _labels(labels)
        jobs = service.find(
            state=state,
            name=name,
            user=user,
            labels=wanted,
            limit=limit,
            team=team,
            queue=queue,
        )
    if output == "table":
        from trainfleet.cli import tables

        tables.print_jobs(jobs)
    else:
        _dump([job.to_dict(exclude={"spec"}) for job in jobs], output)
    return 0


def _labels(pairs: tuple[str, ...]) -> Mapping[str, str]:
    return key_values(pairs, "--label")


def key_values(pairs: Iterable[str], flag: str, key: str = "KEY") -> dict[str, str]:
    """``KEY=VALUE`` words of a repeated flag as a mapping (the last of a key wins);
    UserError naming the flag for a word without ``=`` or a key."""
    found = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise UserError(f"{flag} {pair!r}: expected {key}=VALUE")
        found[name] = value
    return found


def describe(options: Options, job_id: str, output: str) -> int:
    with reader_of(options) as service:
        details = service.describe(job_id)
        running = any(task.state == State.RUNNING for task in details.tasks)
        usage = service.usage(job_id) if output == "table" and running else None
    if output == "table":
        from trainfleet.cli import tables

        tables.print_details(details, usage)
    else:
        _dump(
            {
                "job": details.job.to_dict() | {"spec": json.loads(details.job.spec)},
                "tasks": [task.to_dict() for task in details.tasks],
                "events": [event.to_dict() for event in details.events],
                "checkpoints": [asdict(step) for step in details.checkpoints],
            },
            output,
        )
    return 0


def checkpoints(options: Options, job_id: str, output: str) -> int:
    """``trainfleet checkpoints``: the job's committed checkpoints, oldest first."""
    with reader_of(options) as service:
        steps = service.describe(job_id).checkpoints
    if output == "table":
        from trainfleet.cli import tables

        tables.print_checkpoints(steps)
    else:
        _dump([asdict(step) for step in steps], output)
    return 0


def logs(
    options: Options,
    job_id: str,
    role: str | None,
    index: int | None,
    follow: bool,
    setup: bool = False,
    output: str | None = None,
) -> int:
    """``trainfleet logs``: the tasks' logs, the ``setup`` phase's, or (``output``) the
    job's outputs: "" lists them, a name prints that one's bytes as they are."""
    with reader_of(options) as service:
        if output is not None:
            if setup or follow or role is not None or index is not None:
                raise UserError("--output takes no --role, --index, --follow or --setup")
            return _outputs(service, job_id, output)
        if setup:
            sys.stdout.buffer.write(service.setup_log(job_id))
            sys.stdout.flush()
            return 0
        if index is not None and role is None:
            raise UserError("--index needs --role")
        tasks = service.tasks(job_id)
        chosen = [t for t in tasks if role in (None, t.role) and index in (None, t.index)]
        if not chosen:
            names = ", ".join(dict.fromkeys(t.role for t in tasks))
            which = f"{role}/{index}" if index is not None else str(role)
            raise UserError(f"job {job_id} has no task {which} (roles: {names})")
        follower = LogFollower(service, job_id, [(t.role, t.index) for t in chosen])
        out = sys.stdout.buffer
        while follow and not _ended(service, job_id):
            out.writelines(follower.read())
            out.flush()
            time.sleep(max(FOLLOW_SECONDS, service.poll_interval))
        out.writelines(follower.read(final=True))
        out.flush()
    return 0


def _outputs(service: JobReader, job_id: str, name: str) -> int:
    """The job's outputs as a table (``name`` ""), or the bytes of output ``name``."""
    if name:
        sys.stdout.buffer.write(service.output(job_id, name))
        sys.stdout.flush()
        return 0
    found = service.outputs(job_id)
    if not found:
        click.echo(f"job {job_id}: no output")
        return 0
    from trainfleet.cli import tables

    tables.print_outputs(found)
    return 0


def events(options: Options, job_id: str, follow: bool, output: str) -> int:
    """``trainfleet events``: one line (or JSON/YAML object) per event, oldest first."""
    from trainfleet.cli.follow import EventFollower, describe_event

    with reader_of(options) as service:
        service.get(job_id)
        follower = EventFollower(service, job_id)
        while True:
            # Look at the state before reading, so the events of a job's end are all printed.
            ended = not follow or _ended(service, job_id)
            for event in follower.read():
                if output == "json":
                    click.echo(json.dumps(event.to_dict()))  # one object a line, for streaming
                elif output == "yaml":
                    _dump(event.to_dict(), "yaml")
                    click.echo("---")
                else:
                    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(event.time))
                    click.echo(f"{stamp}  {describe_event(event)}")
            if ended:
                return 0
            time.sleep(max(FOLLOW_SECONDS, service.poll_interval))


def stop(options: Options, job_id: str, output: str) -> int:
    """``trainfleet stop``: cancel a job that has not ended, and wait for its end."""
    with service_of(options) as service:
        job = service.cancel(job_id)
    _show_job(job, output, f"job {job.id} {job.state}" + (f": {job.reason}" if job.reason else ""))
    return 0


def delete(options: Options, job_id: str, force: bool) -> int:
    """``trainfleet delete``: forget a job and its logs."""
    with service_of(options) as service:
        service.delete(job_id, force=force)
    click.echo(f"job {job_id} deleted")
    return 0


def queue_create(
    options: Options,
    name: str,
    cohort: str | None,
    nominal: str | None,
    borrowing_limit: str | None,
    output: str,
) -> int:
    """``trainfleet queue create``: create a queue or replace its configuration."""
    from trainfleet.cli import queues

    with service_of(options) as service:
        _show_queue(queues.create(service, name, cohort, nominal, borrowing_limit), output)
    return 0


def queue_list(options: Options, output: str) -> int:
    """``trainfleet queue list``: every queue, its quota, use and jobs."""
    from trainfleet.cli import queues

    with service_of(options) as service:
        states = service.queues()
    if output == "table":
        queues.print_table(states)
    else:
        _dump([state.model_dump(mode="json") for state in states], output)
    return 0


def queue_describe(options: Options, name: str, output: str) -> int:
    """``trainfleet queue describe``: one queue with its running and waiting jobs."""
    from trainfleet.cli import queues

    with service_of(options) as service:
        _show_queue(queues.find(service, name), output)
    return 0


def _show_queue(state: QueueState, output: str) -> None:
    from trainfleet.cli import queues

    if output == "table":
        queues.print_details(state)
    else:
        _dump(state.model_dump(mode="json"), output)


def _ended(service: JobReader, job_id: str) -> bool:
    return State(service.get(job_id).state).is_final


def _show_job(job: JobRecord, output: str, line: str) -> None:
    if output == "table":
        click.echo(line)
    else:
        _dump(job.to_dict() | {"spec": json.loads(job.spec)}, output)


def _dump(data: object, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)


def export(job_file: str, target: str = "kubeflow", runtimes: Sequence[str] = ()) -> int:
    """Print the Kubeflow manifest (``target``: kubeflow, trainjob) of a job file; what it
    leaves out goes to stderr."""
    import yaml

    from trainfleet.spec.kubeflow_export import manifest_of
    from trainfleet.spec.loading import load_job_file
    from trainfleet.spec.trainjob_export import trainjob_of

    with user_errors():
        loaded = load_job_file(job_file, runtimes)
        convert = trainjob_of if target == "trainjob" else manifest_of
        manifest, left_out = convert(loaded.spec, file=job_file)
    for warning in [*loaded.warnings, *left_out]:
        click.echo(f"warning: {warning}", err=True)
    click.echo(yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True), nl=False)
    return 0
