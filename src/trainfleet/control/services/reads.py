"""Reading a data directory's jobs, their tasks, events, logs and outputs, with the store
alone: the CLI's read commands must not pay for an engine (``Jobs`` adds what needs one)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from trainfleet.datadir.checkpoints import committed_steps
from trainfleet.datadir.layout import DataDir
from trainfleet.datadir.outputs import list_outputs, open_output
from trainfleet.domain.errors import NotFound
from trainfleet.domain.records import (
    EventRecord,
    JobDetails,
    JobNotFound,
    JobPage,
    JobRecord,
    OutputFile,
    State,
    TaskRecord,
)

ACTIVE = (State.RUNNING, State.RESTARTING, State.STARTING)
"""The states of a job that may have running tasks."""

if TYPE_CHECKING:
    from trainfleet.control.engine import Engine
    from trainfleet.store.database import Store


class JobReads:
    """The jobs stored in ``store``, their tasks, events, logs and outputs under ``data_dir``."""

    def __init__(self, store: Store, data_dir: DataDir) -> None:
        self.store = store
        self.data_dir = data_dir

    @classmethod
    def open(cls, data_dir: DataDir) -> JobReads:
        """The jobs of ``data_dir``'s own database (made if missing)."""
        from trainfleet.store.database import Store

        data_dir.ensure()
        return cls(Store.open(data_dir.database), data_dir)

    @classmethod
    def of(cls, engine: Engine) -> JobReads:
        """The jobs ``engine`` keeps."""
        return cls(engine.store, engine.data_dir)

    def get(self, job_id: str) -> JobRecord:
        """The job; JobNotFound if there is none."""
        job = self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r}")
        return job

    def settled(self, job: JobRecord) -> JobRecord:
        """``job``, recorded as failed first where the local process that ran it (an
        embedded run's) is gone; the engine is built only for such a job."""
        if State(job.state).is_final:
            return job
        from trainfleet.control import local_admission
        from trainfleet.datadir.runners import lost_runner

        if lost_runner(self.data_dir, job.id) is None:
            return job
        from trainfleet.control.assembly import embedded_engine
        from trainfleet.control.settings import Settings

        engine = embedded_engine(Settings.resolve(data_dir=str(self.data_dir.root)))
        try:
            return local_admission.fail_if_lost(engine, engine.get(job.id))
        finally:
            engine.store.close()

    def tasks(self, job_id: str) -> list[TaskRecord]:
        """The job's tasks in the spec's order (JobNotFound if there is no job)."""
        tasks = self.store.list_tasks(job_id)
        if not tasks:  # every job has a task: this one does not exist
            self.get(job_id)
        return tasks

    def tasks_of(self, job_ids: Sequence[str]) -> dict[str, list[TaskRecord]]:
        """The tasks of each of ``job_ids`` that exists, read at once (a page of jobs)."""
        return self.store.tasks_of(job_ids)

    def active(self, page_size: int = 500) -> Iterator[tuple[JobRecord, list[TaskRecord]]]:
        """Every job that may have running tasks (starting, running, restarting), with its
        tasks: a page of jobs at a time, their tasks in one read per page."""
        for state in ACTIVE:
            cursor: str | None = None
            while True:
                page = self.page(state=state.value, limit=page_size, cursor=cursor)
                tasks = self.tasks_of([job.id for job in page.jobs])
                for job in page.jobs:
                    yield job, tasks.get(job.id, [])
                cursor = page.next_cursor
                if cursor is None:
                    break

    def events(self, job_id: str, after: int = 0) -> list[EventRecord]:
        """The job's events with an id above ``after``, oldest first."""
        return self.store.list_events(job_id, after=after)

    def details(self, job: JobRecord) -> JobDetails:
        """``job`` with its tasks, events and committed checkpoints."""
        tasks, events = self.store.list_tasks(job.id), self.events(job.id)
        return JobDetails(job, tasks, events, committed_steps(self.data_dir, job))

    def page(
        self,
        *,
        state: str | None = None,
        name: str | None = None,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        teams: list[str] | None = None,
        queue: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of matching jobs (of ``teams`` only, if given), newest first, with the
        count of each state among them (raises ValueError on a bad cursor)."""
        return self.store.find_jobs(
            state=state,
            name=name,
            user=user,
            labels=labels,
            teams=teams,
            queue=queue,
            limit=limit,
            cursor=cursor,
        )

    def changes(self, after: int, limit: int) -> list[EventRecord]:
        """Every job's events with an id above ``after``, oldest first, at most ``limit``
        (ids grow in commit order: none read later has a lower id)."""
        return self.store.changes(after, limit)

    def newest_change(self) -> int:
        """The id of the newest event of any job (0 where there is none)."""
        return self.store.newest_event()

    def log_path(self, job_id: str, role: str, index: int) -> Path:
        """Where a task's log is, on a backend that keeps it in the data directory."""
        return self.data_dir.log_path(job_id, role, index)

    def setup_log(self, job_id: str) -> Path:
        """Where the job's ``setup`` phase wrote its output."""
        return self.data_dir.setup_log(job_id)

    def outputs(self, job: JobRecord) -> list[OutputFile]:
        """The files ``job``'s tasks left in its output folder (``datadir.outputs``), by
        name; ``job``: as found for, and checked against, the caller."""
        return list_outputs(self.data_dir.output_dir(job.id))

    def open_output(self, job: JobRecord, name: str) -> tuple[BinaryIO, int]:
        """``job``'s output ``name``, opened, with its size: NotFound naming the job's
        outputs where it has no such one, BadInput for a bad name or a file too large."""
        try:
            return open_output(self.data_dir.output_dir(job.id), name)
        except NotFound as error:
            raise NotFound(f"job {job.id} has {error}") from None

    def read_output(self, job: JobRecord, name: str) -> bytes:
        """The bytes of ``job``'s output ``name`` (as ``open_output`` finds it)."""
        file, size = self.open_output(job, name)
        with file:
            return file.read(size)

    def count_jobs(self) -> dict[str, int]:
        """Stored jobs by state."""
        return self.store.count_jobs()

    def count_tasks(self) -> dict[str, int]:
        """Stored tasks by state."""
        return self.store.count_tasks()

    def count_restarts(self) -> int:
        """Restarts of the stored tasks, added up."""
        return self.store.count_restarts()

    def close(self) -> None:
        self.store.close()
