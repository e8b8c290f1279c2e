"""What every command talks to: a job service, the embedded engine or a server.

Each command has one implementation, written against the protocols here (``JobReader``,
``JobService``, and the ``JobInput`` they are given); ``trainfleet.cli.factory`` picks
the service the configuration names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from trainfleet.datadir.logs import LogTail
    from trainfleet.domain.links import ServiceLink
    from trainfleet.domain.records import (
        EventRecord,
        JobDetails,
        JobRecord,
        OutputFile,
        TaskRecord,
    )
    from trainfleet.spec.models import JobSpec
    from trainfleet.spec.submarine import SubmarineArgs
    from trainfleet.wire import GpuState, JobUsage, QueueBody, QueueState


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
    spec: JobSpec | None = None
    """A job a command built (``notebook start``), run in the current folder by default."""


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
        team: str | None = None,
        queue: str | None = None,
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

    def outputs(self, job_id: str) -> list[OutputFile]:
        """The files the job's tasks left in its output folder, by name."""
        ...

    def output(self, job_id: str, name: str) -> bytes:
        """The bytes of the job's output ``name`` (NotFound, BadInput: see ``datadir.outputs``)."""
        ...

    def usage(self, job_id: str, history: bool = False) -> JobUsage:
        """What each task of the job uses: the newest sample of each running one, and
        each one's history with ``history``."""
        ...

    def links(self, job_id: str) -> list[ServiceLink]:
        """The job's services (its TensorBoard), each with the ``url`` this machine opens
        it at: the server's proxy, or the task's own port here."""
        ...

    def event_dir(self, job_id: str) -> str | None:
        """The folder its TensorBoard reads, where this machine sees it (embedded); None
        where the job has none or runs on a server."""
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

    def gpus(self) -> list[GpuState]:
        """Each GPU of the machine jobs are placed on, with its health and its tasks."""
        ...

    def clear_gpu(self, index: int) -> GpuState:
        """Mark GPU ``index`` healthy again (an operator's word): its problems are ignored."""
        ...
