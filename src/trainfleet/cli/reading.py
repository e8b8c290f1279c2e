"""``JobReader`` on this machine's store alone, for ``list``, ``describe``, ``logs``, ``events``.

The read commands need no engine: building one loads the backends, the scheduler and the
controller, which cost most of a read command's time. A job whose runner is gone is still
recorded as failed (lost) first, as ``EngineService`` does; only a job that has not ended
is looked at, and the engine is opened only for one whose runner is gone.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainfleet.control.settings import data_dir_of
from trainfleet.datadir.layout import DataDir
from trainfleet.datadir.logs import LogTail, read_range
from trainfleet.domain.records import (
    EventRecord,
    JobDetails,
    JobNotFound,
    JobRecord,
    State,
    TaskRecord,
)
from trainfleet.store.database import Store


class StoreReader:
    """Jobs, tasks, events and logs in a data directory on this machine, read only."""

    poll_interval = 0.05

    def __init__(self, data_dir: DataDir, store: Store) -> None:
        self.data_dir = data_dir
        self.store = store

    @classmethod
    def open(cls, data_dir: str | None) -> StoreReader:
        resolved = data_dir_of(data_dir)
        resolved.ensure()
        return cls(resolved, Store.open(resolved.database))

    def get(self, job_id: str) -> JobRecord:
        job = self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r}")
        return self._checked(job)

    def describe(self, job_id: str) -> JobDetails:
        job = self.get(job_id)
        return JobDetails(job, self.store.list_tasks(job_id), self.store.list_events(job_id))

    def tasks(self, job_id: str) -> list[TaskRecord]:
        tasks = self.store.list_tasks(job_id)
        if not tasks:  # every job has a task: this one does not exist
            self.get(job_id)
        return tasks

    def find(
        self,
        *,
        state: str | None,
        name: str | None,
        user: str | None,
        labels: Mapping[str, str],
        limit: int,
    ) -> list[JobRecord]:
        page = self.store.find_jobs(state=state, name=name, user=user, labels=labels, limit=limit)
        return [self._checked(job) for job in page.jobs]

    def events(self, job_id: str, after: int) -> list[EventRecord]:
        return self.store.list_events(job_id, after=after)

    def log_tail(self, job_id: str, role: str, index: int) -> LogTail:
        return LogTail(self.data_dir.log_path(job_id, role, index))

    def setup_log(self, job_id: str) -> bytes:
        self.get(job_id)
        return read_range(self.data_dir.setup_log(job_id))

    def close(self) -> None:
        self.store.close()

    def _checked(self, job: JobRecord) -> JobRecord:
        """The job, recorded as failed first if the process that ran it is gone."""
        if State(job.state).is_final:
            return job
        from trainfleet.control import local_admission

        if local_admission.lost_runner(self.data_dir, job.id) is None:
            return job
        from trainfleet.cli.embedded import EngineService

        service = EngineService.open(str(self.data_dir.root))
        try:
            return service.get(job.id)
        finally:
            service.close()
