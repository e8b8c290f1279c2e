"""``JobReader`` on this machine's jobs (``control.services.reads``), for ``list``, ``describe``,
``logs`` (and a job's outputs), ``events``.

The read commands need no engine: building one loads the backends, the scheduler and the
controller, which cost most of a read command's time. A job whose runner is gone is still
recorded as failed (lost) first, as ``EngineService`` does; only a job that has not ended
is looked at, and the engine is opened only for one whose runner is gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from trainfleet.control.services.reads import JobReads
from trainfleet.control.settings import data_dir_of
from trainfleet.datadir.layout import DataDir
from trainfleet.datadir.logs import LogTail, read_range
from trainfleet.domain.links import ServiceLink
from trainfleet.domain.records import (
    EventRecord,
    JobDetails,
    JobRecord,
    OutputFile,
    TaskRecord,
)

if TYPE_CHECKING:
    from trainfleet.wire import JobUsage


class StoreReader:
    """Jobs, tasks, events, logs and outputs in a data directory on this machine, read only."""

    poll_interval = 0.05

    def __init__(self, data_dir: DataDir, jobs: JobReads) -> None:
        self.data_dir = data_dir
        self.jobs = jobs

    @classmethod
    def open(cls, data_dir: str | None) -> StoreReader:
        resolved = data_dir_of(data_dir)
        return cls(resolved, JobReads.open(resolved))

    def get(self, job_id: str) -> JobRecord:
        return self._checked(self.jobs.get(job_id))

    def describe(self, job_id: str) -> JobDetails:
        return self.jobs.details(self.get(job_id))

    def links(self, job_id: str) -> list[ServiceLink]:
        """Each service at its task's own address (loopback: no proxy in between), but a
        notebook: Jupyter's token stays in the proxy (``trainfleet ui``), so no URL here."""
        from trainfleet.control.services.links import direct_url, service_links

        job = self.get(job_id)
        return [
            replace(link, url=direct_url(job_id, link))
            for link in service_links(job, self.jobs.tasks(job_id))
        ]

    def event_dir(self, job_id: str) -> str | None:
        from trainfleet.spec.models import JobSpec

        job = self.get(job_id)
        logdir = JobSpec.model_validate_json(job.spec).tensorboard_logdir()
        if logdir is None or "://" in logdir:
            return logdir
        return str(Path(job.workdir) / logdir)

    def tasks(self, job_id: str) -> list[TaskRecord]:
        return self.jobs.tasks(job_id)

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
        teams = None if team is None else [team]
        page = self.jobs.page(
            state=state, name=name, user=user, labels=labels, teams=teams, queue=queue, limit=limit
        )
        return [self._checked(job) for job in page.jobs]

    def events(self, job_id: str, after: int) -> list[EventRecord]:
        return self.jobs.events(job_id, after=after)

    def usage(self, job_id: str, history: bool = False) -> JobUsage:
        from trainfleet.control.access import EMBEDDED
        from trainfleet.control.services.usage import Usage  # the REST models: `top` only

        self.get(job_id)  # a lost job is recorded as failed first
        return Usage(self.jobs).job(EMBEDDED, job_id, history=history)

    def log_tail(self, job_id: str, role: str, index: int) -> LogTail:
        return LogTail(self.jobs.log_path(job_id, role, index))

    def setup_log(self, job_id: str) -> bytes:
        self.get(job_id)
        return read_range(self.jobs.setup_log(job_id))

    def outputs(self, job_id: str) -> list[OutputFile]:
        return self.jobs.outputs(self.get(job_id))

    def output(self, job_id: str, name: str) -> bytes:
        return self.jobs.read_output(self.get(job_id), name)

    def close(self) -> None:
        self.jobs.close()

    def _checked(self, job: JobRecord) -> JobRecord:
        """The job, recorded as failed first if the process that ran it is gone."""
        return self.jobs.settled(job)
