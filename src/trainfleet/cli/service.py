"""The job service every command talks to: the embedded engine, or a server.

Each command has one implementation, written against ``JobService``; ``open_service``
picks ``EngineService`` (no server configured) or ``RemoteService`` (``--server``,
``TRAINFLEET_SERVER`` or the config file). The remote one is imported only when used,
so ``trainfleet run`` without a server never loads httpx.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from trainfleet.cli.config import Target
    from trainfleet.cli.remote import RemoteService
    from trainfleet.datadir.logs import LogTail
    from trainfleet.domain.records import EventRecord, JobDetails, JobRecord, TaskRecord
    from trainfleet.spec.submarine import SubmarineArgs
    from trainfleet.wire import QueueBody, QueueState


@dataclass(frozen=True)
class Options:
    """The global options: ``--data-dir`` (embedded engine), ``--server`` and ``--ca-cert``."""

    data_dir: str | None = None
    server: str | None = None
    ca_cert: str | None = None


@dataclass(frozen=True)
class JobInput:
    """A job as the user gave it: a file or Submarine-style flags, and where it runs."""

    file: str | None = None
    submarine: SubmarineArgs | None = None
    workdir: str | None = None
    """The job's directory here (default: the job file's folder); a server gets a copy."""
    server_workdir: str | None = None
    """A directory on the server the job runs in as it is (with a server only)."""
    runtimes: tuple[str, ...] = ()
    """Files of Kubeflow training runtimes a TrainJob may name (``--runtime``)."""


class JobReader(Protocol):
    """What the read commands (``list``, ``describe``, ``logs``, ``events``) need."""

    poll_interval: float
    """Seconds between two looks at a followed job."""

    def get(self, job_id: str) -> JobRecord: ...

    def describe(self, job_id: str) -> JobDetails: ...

    def tasks(self, job_id: str) -> list[TaskRecord]:
        """The job's tasks, in the spec's order."""
        ...

    def find(
        self,
        *,
        state: str | None,
        name: str | None,
        user: str | None,
        labels: Mapping[str, str],
        limit: int,
    ) -> list[JobRecord]:
        """Matching jobs, newest first."""
        ...

    def events(self, job_id: str, after: int) -> list[EventRecord]:
        """The job's events with an id above ``after``, oldest first."""
        ...

    def log_tail(self, job_id: str, role: str, index: int) -> LogTail:
        """A reader of one task's log, from its start."""
        ...

    def setup_log(self, job_id: str) -> bytes:
        """The output of the job's ``setup`` phase (its Python environments' builds)."""
        ...

    def close(self) -> None: ...


class JobService(JobReader, Protocol):
    """What the commands need of a place that stores and runs jobs."""

    def submit(self, job: JobInput, *, detach: bool) -> JobRecord:
        """Store a job. ``detach``: it runs without this process; otherwise call ``attach``."""
        ...

    def attach(self, job_id: str) -> str:
        """Make sure the job runs (here, for an embedded ``run``); says where its logs are."""
        ...

    def wait(self, job_id: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True once the job has ended."""
        ...

    def cancel(self, job_id: str, reason: str = "cancelled by user") -> JobRecord:
        """Stop a job; returns it once it has ended (an ended job is returned as it is)."""
        ...

    def interrupt(self, job_id: str) -> None:
        """Ask a job to stop (Ctrl-C in ``run``), without waiting; again to kill it."""
        ...

    def delete(self, job_id: str, force: bool) -> None: ...

    def queues(self) -> list[QueueState]:
        """Every queue, with what it uses and its jobs."""
        ...

    def put_queue(self, name: str, body: QueueBody) -> QueueState:
        """Create a queue or replace its configuration."""
        ...


def target_of(options: Options) -> Target:
    """The server (URL, token, CA certificate) every command talks to: from the flags, the
    environment, then the config file (see ``trainfleet.cli.config``); none: embedded."""
    from trainfleet.cli.config import resolve

    return resolve(options.server, options.ca_cert)


def open_service(options: Options) -> JobService:
    """The service the configuration names (see ``trainfleet.cli.config``)."""
    target = target_of(options)
    if target.server is None:
        return embedded(options)
    from trainfleet.cli.remote import RemoteService

    return RemoteService(target)


def open_reader(options: Options) -> JobReader:
    """Like ``open_service``, for the read commands: embedded, only the store is opened."""
    target = target_of(options)
    if target.server is None:
        from trainfleet.cli.config import backend_config, config_path
        from trainfleet.cli.reading import StoreReader

        if config_path().exists():
            backend_config()  # a malformed file is named here too, as by the engine
        return StoreReader.open(options.data_dir)
    from trainfleet.cli.remote import RemoteService

    return RemoteService(target)


def open_remote(options: Options, what: str) -> RemoteService:
    """The configured server, for what only a server has; UserError saying ``what`` is on
    a server where none is configured."""
    from trainfleet.cli.errors import UserError
    from trainfleet.cli.remote import RemoteService

    target = target_of(options)
    if target.server is None:
        raise UserError(f"{what} on a server: give --server or set TRAINFLEET_SERVER")
    return RemoteService(target)


def embedded(options: Options) -> JobService:
    """The engine on this machine's data directory, whatever the configuration says."""
    from trainfleet.cli.embedded import EngineService

    return EngineService.open(options.data_dir)
