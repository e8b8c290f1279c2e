"""``JobService`` on a trainfleet server, through the SDK (``trainfleet.client``).

The server's refusals are the SDK's errors, each of the same kind (trainfleet.domain.errors)
as the embedded engine raises for the same failure, with the server's own message: a job
file with mistakes reads the same (file, line, field) and exits the same with or without
a server.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import click

from trainfleet.cli.errors import UserError
from trainfleet.cli.service import JobInput
from trainfleet.client import (
    Client,
    ServerError,
    ServerTail,
    Unauthorized,
    Untrusted,
)
from trainfleet.control.settings import Target
from trainfleet.datadir.logs import LogTail
from trainfleet.domain.errors import BadInput
from trainfleet.domain.links import ServiceLink
from trainfleet.domain.records import (
    EventRecord,
    JobDetails,
    JobRecord,
    OutputFile,
    State,
    TaskRecord,
)
from trainfleet.spec.documents import read_job_text
from trainfleet.spec.loading import load_job_file
from trainfleet.spec.models import JobSpec
from trainfleet.wire import GpuState, JobUsage, QueueBody, QueueState

T = TypeVar("T")

STOP_TIMEOUT = 60.0
"""Seconds ``cancel`` waits for the server to stop a job."""

REQUEST_TIMEOUT = 30.0
"""Seconds one request may wait to connect, send or read before it fails."""

MAX_PAGE = 1000
"""The largest page the server sends."""


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def connect(target: Target) -> Client:
    """The one way the CLI reaches a server: the target's URL, token and CA certificate,
    with the CLI's timeout and warnings; UserError naming where a bad CA file came from."""
    assert target.server is not None, "a target with a server"
    try:
        return Client(
            target.server,
            target.token,
            timeout=REQUEST_TIMEOUT,
            on_warning=_warn,
            ca_cert=target.ca_cert,
        )
    except BadInput as error:
        raise UserError(f"{target.ca_source}: {error}") from None


class RemoteService:
    """Jobs stored and run by a server; this process only asks and shows."""

    poll_interval = 0.25

    def __init__(self, target: Target) -> None:
        self.token = target.token
        self.client = connect(target)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """The server's refusals, said for the CLI where a hint helps."""
        try:
            yield
        except Unauthorized:
            problem = "refused the token" if self.token else "needs a token"
            raise UserError(f"the server {problem} (set TRAINFLEET_TOKEN)") from None
        except Untrusted as error:
            hint = "pass --ca-cert or set TRAINFLEET_CA_CERT"
            raise UserError(f"{error}; {hint}", exit_code=error.exit_code) from None
        except ServerError as error:
            raise UserError(f"the server failed: {error}", exit_code=1) from None

    def call(self, action: Callable[[], T]) -> T:
        with self._errors():
            return action()

    def submit(self, job: JobInput, *, detach: bool) -> JobRecord:
        """Send the job, and its directory unless it runs in one on the server; the server
        starts it at once (``detach`` makes no difference)."""
        if job.file and job.submarine:
            raise UserError("give a job file or Submarine-style flags, not both")
        if job.workdir is not None and job.server_workdir is not None:
            raise UserError("give --workdir (sent to the server) or --server-workdir, not both")
        if job.spec is not None:
            content: str | JobSpec = job.spec
            folder, name = Path.cwd(), None
        elif job.submarine:
            from trainfleet.spec.submarine import from_submarine_args

            loaded = from_submarine_args(job.submarine)
            for warning in loaded.warnings:
                _warn(warning)
            content = loaded.spec
            folder, name = Path.cwd(), None
        elif job.file and job.runtimes:  # the server knows the built-in runtimes only
            loaded = load_job_file(job.file, job.runtimes)
            for warning in loaded.warnings:
                _warn(warning)
            content, name = loaded.spec, job.file
            folder = Path(job.file).resolve().parent
        elif job.file:
            content, name = read_job_text(job.file), job.file
            folder = Path(job.file).resolve().parent
        else:
            raise UserError("missing JOB_FILE (or Submarine-style flags such as --num_workers)")
        where: dict[str, str] = (
            {"server_workdir": job.server_workdir}
            if job.server_workdir is not None
            else {"workdir": job.workdir or str(folder)}
        )
        return self.call(lambda: self.client.submit(content, filename=name, **where))

    def attach(self, job_id: str) -> str:
        return f"runs on {self.client.url}"

    def wait(self, job_id: str, timeout: float) -> bool:
        time.sleep(timeout)
        return State(self.get(job_id).state).is_final

    def get(self, job_id: str) -> JobRecord:
        return self.call(lambda: self.client.get(job_id))

    def describe(self, job_id: str) -> JobDetails:
        details = self.call(lambda: self.client.describe(job_id))
        return JobDetails(details.job, details.tasks, details.events, details.checkpoints)

    def tasks(self, job_id: str) -> list[TaskRecord]:
        return self.describe(job_id).tasks

    def links(self, job_id: str) -> list[ServiceLink]:
        """Each service through the server's proxy (signed in as in the dashboard)."""
        details = self.call(lambda: self.client.describe(job_id))
        return [replace(link, url=self.client.url + link.path) for link in details.services]

    def event_dir(self, job_id: str) -> str | None:
        return None  # on the server's file system

    def usage(self, job_id: str, history: bool = False) -> JobUsage:
        return self.call(lambda: self.client.usage(job_id, history=history))

    def find(
        self,
        *,
        state: str | None,
        name: str | None,
        user: str | None,
        labels: Mapping[str, str],
        limit: int,
        team: str | None = None,
        queue: str | None = None,
    ) -> list[JobRecord]:
        jobs = self.client.list_jobs(
            state=state,
            name=name,
            user=user,
            labels=labels,
            team=team,
            queue=queue,
            page_size=min(limit, MAX_PAGE),
        )
        return self.call(lambda: list(itertools.islice(jobs, limit)))

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:
        """Ask the server to stop the job (it records who did), then wait for its end."""
        job = self.call(lambda: self.client.cancel(job_id))
        deadline = time.monotonic() + STOP_TIMEOUT
        while not State(job.state).is_final:
            if time.monotonic() > deadline:
                raise UserError(f"job {job_id} did not stop within {STOP_TIMEOUT:.0f}s", 1)
            time.sleep(self.poll_interval)
            job = self.get(job_id)
        return job

    def interrupt(self, job_id: str) -> None:
        self.call(lambda: self.client.cancel(job_id))

    def delete(self, job_id: str, force: bool) -> None:
        self.call(lambda: self.client.delete(job_id, force=force))

    def events(self, job_id: str, after: int) -> list[EventRecord]:
        return self.call(lambda: self.client.events(job_id, after))

    def log_tail(self, job_id: str, role: str, index: int) -> LogTail:
        return RemoteTail(self, job_id, role, index)

    def setup_log(self, job_id: str) -> bytes:
        return self.call(lambda: self.client.read_setup_log(job_id))

    def outputs(self, job_id: str) -> list[OutputFile]:
        found = self.call(lambda: self.client.job_outputs(job_id))
        return [OutputFile(output.name, output.size, output.modified) for output in found]

    def output(self, job_id: str, name: str) -> bytes:
        return self.call(lambda: self.client.job_output(job_id, name))

    def queues(self) -> list[QueueState]:
        return self.call(self.client.queues)

    def put_queue(self, name: str, body: QueueBody) -> QueueState:
        return self.call(lambda: self.client.put_queue(name, body))

    def gpus(self) -> list[GpuState]:
        return self.call(self.client.gpus)

    def clear_gpu(self, index: int) -> GpuState:
        return self.call(lambda: self.client.clear_gpu(index))

    def close(self) -> None:
        self.client.close()


class RemoteTail(ServerTail):
    """A ``ServerTail`` whose requests fail as the CLI says it (``RemoteService.call``)."""

    def __init__(self, service: RemoteService, job_id: str, role: str, index: int) -> None:
        super().__init__(service.client, job_id, role, index, service.call)
