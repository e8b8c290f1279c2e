"""The service functions every face calls: submit, run, list, describe, cancel, logs.

``trainfleet run`` without a server embeds this engine in its own process.
"""

from __future__ import annotations

import getpass
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainfleet.backends.api import Backend, TaskLaunch
from trainfleet.backends.local import LocalBackend
from trainfleet.control.controller import JobController, task_launch
from trainfleet.scheduling.placement import (
    Placement,
    TaskKey,
    TaskSlot,
    assign_gpus,
    build_placement,
    task_keys,
)
from trainfleet.spec.models import JobSpec
from trainfleet.store.database import Store
from trainfleet.store.layout import DataDir
from trainfleet.store.records import EventRecord, JobRecord, State, TaskRecord


class JobNotFound(LookupError):
    """No job has that id."""


@dataclass(frozen=True)
class JobDetails:
    """A job with its tasks and events, as ``describe`` shows it."""

    job: JobRecord
    tasks: list[TaskRecord]
    events: list[EventRecord]


class Engine:
    """Jobs stored under one data directory and run on one backend."""

    def __init__(self, data_dir: DataDir, backend: Backend | None = None) -> None:
        data_dir.root.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.store = Store(data_dir.database)
        self.backend: Backend = backend or LocalBackend()

    def plan(self, spec: JobSpec) -> Placement:
        """Place every task: free ports, exclusive GPUs. Raises Unschedulable."""
        wants_gpus = any(role.resources.gpu for role in spec.roles.values())
        gpus = assign_gpus(spec, self.backend.gpu_inventory()) if wants_gpus else {}
        fixed: Mapping[TaskKey, int | None] = {
            (role, index): _fixed_port(spec.roles[role].port, index)
            for role, index in task_keys(spec)
        }
        ports = self.backend.reserve_ports(fixed)
        return build_placement(spec, self.backend.host(), ports, gpus)

    def submit(self, spec: JobSpec, workdir: Path, source: str = "trainfleet") -> JobRecord:
        """Validate placement and store the job, queued. Raises Unschedulable."""
        placement = self.plan(spec)
        job = JobRecord(
            id=f"{spec.name}-{secrets.token_hex(3)}",
            name=spec.name,
            framework=spec.framework.value,
            spec=spec.model_dump_json(),
            source=source,
            workdir=str(workdir),
            user=_user(),
            created_at=time.time(),
        )
        tasks = [
            TaskRecord(
                job_id=job.id,
                role=slot.role,
                index=slot.index,
                address=slot.address,
                gpus=",".join(map(str, slot.gpus)),
            )
            for slot in placement
        ]
        self.store.add_job(job, tasks)
        return job

    def controller(self, job_id: str) -> JobController:
        """The controller that runs a stored job."""
        job = self.get(job_id)
        spec = JobSpec.model_validate_json(job.spec)
        placement = Placement(tuple(_slot(task) for task in self.store.list_tasks(job_id)))
        return JobController(
            job.id, spec, placement, Path(job.workdir), self.store, self.backend, self.data_dir
        )

    def dry_run(self, spec: JobSpec, workdir: Path) -> list[TaskLaunch]:
        """What ``run`` would start, without storing or starting anything."""
        placement = self.plan(spec)
        job_id = f"{spec.name}-dryrun"
        return [
            task_launch(job_id, spec, placement, slot.key, workdir, self.data_dir)
            for slot in placement
        ]

    def get(self, job_id: str) -> JobRecord:
        job = self.store.get_job(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r}")
        return job

    def describe(self, job_id: str) -> JobDetails:
        return JobDetails(self.get(job_id), self.tasks(job_id), self.store.list_events(job_id))

    def tasks(self, job_id: str) -> list[TaskRecord]:
        spec_order = {
            key: n
            for n, key in enumerate(task_keys(JobSpec.model_validate_json(self.get(job_id).spec)))
        }
        return sorted(
            self.store.list_tasks(job_id), key=lambda t: spec_order.get((t.role, t.index), 0)
        )

    def list(self, limit: int = 100) -> list[JobRecord]:
        return self.store.list_jobs(limit)

    def log_path(self, job_id: str, role: str, index: int) -> Path:
        return self.data_dir.log_path(job_id, role, index)


def _fixed_port(first: int | None, index: int) -> int | None:
    return None if first is None else first + index


def _slot(task: TaskRecord) -> TaskSlot:
    host, _, port = task.address.rpartition(":")
    gpus = tuple(int(gpu) for gpu in task.gpus.split(",") if gpu)
    return TaskSlot(task.role, task.index, host, int(port), gpus)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def is_final(job: JobRecord) -> bool:
    return State(job.state).is_final
