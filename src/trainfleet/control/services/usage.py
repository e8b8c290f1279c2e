"""What jobs' tasks use (CPU, memory, GPUs), read from each task's history beside its log
(``datadir.usage``, written by the task's supervisor): for ``trainfleet top``,
``describe``, ``GET /api/v1/jobs/{id}/usage`` and ``/metrics``. Reading is checked like
reading the job (``Action.READ_JOB``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from trainfleet.control.access import Action, Caller
from trainfleet.control.services.ownership import allowed_job
from trainfleet.control.services.reads import JobReads
from trainfleet.datadir import usage
from trainfleet.domain.records import JobRecord, State, TaskRecord
from trainfleet.wire import JobUsage, TaskUsage, UsagePoint


def point(sample: usage.Sample) -> UsagePoint:
    return UsagePoint(
        time=sample.time,
        cpu=round(sample.cpu, 1),
        rss=sample.rss,
        gpu_util=None if sample.gpu_util is None else round(sample.gpu_util, 1),
        gpu_memory=sample.gpu_memory,
        samples=sample.samples,
    )


class Usage:
    """The resource use of the jobs ``reads`` holds, as callers may see it."""

    def __init__(self, reads: JobReads) -> None:
        self.reads = reads

    def job(
        self, caller: Caller, job_id: str, history: bool = False, since: float = 0.0
    ) -> JobUsage:
        """What each task of the job uses now (the newest sample of each running task);
        ``history``: and its history from ``since`` (seconds since the epoch). NotFound
        where the caller may not see the job (as for one that does not exist)."""
        job = allowed_job(caller, self.reads.get(job_id), Action.READ_JOB)
        return self.of(job, history, since)

    def of(
        self,
        job: JobRecord,
        history: bool = False,
        since: float = 0.0,
        job_tasks: list[TaskRecord] | None = None,
    ) -> JobUsage:
        """``job``'s use, unchecked (see ``job``); ``job_tasks``: its tasks, read already."""
        tasks = []
        for task in self.reads.tasks(job.id) if job_tasks is None else job_tasks:
            path = self._path(task)
            tasks.append(
                TaskUsage(
                    role=task.role,
                    index=task.index,
                    state=task.state,
                    current=self._current(task, path),
                    history=[point(s) for s in usage.read(path) if s.time >= since]
                    if history
                    else [],
                )
            )
        return JobUsage(job_id=job.id, team=job.team, tasks=tasks)

    def running(self) -> Iterator[JobUsage]:
        """Every job that may have running tasks, with the newest sample of each (for
        ``/metrics``: unchecked, every team's)."""
        for job, tasks in self.reads.active():  # a page's tasks at once (/metrics: 1,000)
            yield self.of(job, job_tasks=tasks)

    def _path(self, task: TaskRecord) -> Path:
        return usage.usage_path(self.reads.log_path(task.job_id, task.role, task.index))

    @staticmethod
    def _current(task: TaskRecord, path: Path) -> UsagePoint | None:
        """The newest sample of a running task's attempt (not of one before it)."""
        if State(task.state) is not State.RUNNING:
            return None
        sample = usage.latest(path)
        if sample is None or (task.started_at is not None and sample.time < task.started_at):
            return None
        return point(sample)
